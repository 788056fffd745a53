/* simd_end.h: undefines the names simd.h defined for one instruction set and element type (and
 * SIMD_ISA, SIMD_BITS), so that the next instance of a template can include simd.h again. */
#undef SIMD_ISA
#undef SIMD_BITS
#undef VATTR
#undef SIMD_REGS
#undef V_FENCE
#undef V
#undef VL
#undef VMASK
#undef V_MASK_N
#undef V_MASK_ALL
#undef V_ZERO
#undef V_SET1
#undef V_LOAD
#undef V_STORE
#undef V_MLOAD
#undef V_MSTORE
#undef V_STREAM
#undef V_ADD
#undef V_SUB
#undef V_MUL
#undef V_FMA
#undef V_FNMA
#undef V_FNMS
#undef V_HSUM
