package apps

import "github.com/spf13/pflag"

func newFlagSet() *pflag.FlagSet { return pflag.NewFlagSet("whereami", pflag.ContinueOnError) }
