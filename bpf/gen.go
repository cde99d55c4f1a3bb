// Package bpf holds Causeway's eBPF programs and their Go bindings.
//
// Each program is a C file in this directory (built with the pinned headers
// under include/) compiled by bpf2go into a *_bpfel.o object that is embedded
// in a generated *_bpfel.go file. Both are committed, so building Causeway
// needs no C toolchain; `make generate-bpf` regenerates them with clang-19.
// See README.md for the layout and for what each program does.
package bpf

//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target bpfel -cflags "-O2 -g -Wall -Werror -nostdinc -I./include" Vip vip.c
