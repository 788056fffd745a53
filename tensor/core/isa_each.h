/* isa_each.h: instantiate the f32 kernel template named by ISA_TMPL (a quoted file name) once
 * per instruction set of vmath.h's run-time dispatch: with T float and SFX f32 for the baseline,
 * then (where VM_DISPATCH) SFX f32_avx2 and f32_avx512 under `#pragma GCC target`. The includer
 * defines ISA_TMPL and whatever else its template reads, includes this file, then undefines
 * them. No include guard: each kernel family includes it once. As this file sits in core/,
 * ISA_TMPL names the template by its path from tensor/ ("elementwise/map_tmpl.h"). */
#define T float
#define SFX f32
#include ISA_TMPL
#undef SFX
#if VM_DISPATCH
#pragma GCC push_options
#pragma GCC target("avx2")
#define SFX f32_avx2
#include ISA_TMPL
#undef SFX
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f")
#define SFX f32_avx512
#include ISA_TMPL
#undef SFX
#pragma GCC pop_options
#endif
#undef T
