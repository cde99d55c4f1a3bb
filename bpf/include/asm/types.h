/* Causeway: the BPF target has no arch-specific UAPI asm headers; use the
 * generic ones, as the kernel's generic-y wrappers do. */
#include <asm-generic/types.h>
