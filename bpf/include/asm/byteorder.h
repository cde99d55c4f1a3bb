/* Causeway: the BPF target has no arch-specific UAPI asm headers; pick the
 * byte order clang compiles for (bpfel or bpfeb). */
#ifndef _CAUSEWAY_ASM_BYTEORDER_H
#define _CAUSEWAY_ASM_BYTEORDER_H

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#include <linux/byteorder/little_endian.h>
#elif __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#include <linux/byteorder/big_endian.h>
#else
#error "unknown byte order"
#endif

#endif
