// Hot loops are compiled for AVX-512 (x86-64-v4: F, BW, VL, DQ, CD; F alone would leave
// GCC without 256-bit rotates and 16-bit narrowing, so that a loop's Threefry rotations
// took three instructions and its float -> bfloat16 stores went through AVX2 packs), AVX2
// and baseline x86-64, and picked at load time, so one portable binary runs at the host's
// vector width. Vectorizing changes no result:
// the operations and their order per element are the same (-ffp-contract=off, no
// reassociation: a loop-carried float sum stays scalar, in order).
//
// OpenMP regions are outlined into functions of their own, which do not inherit the
// clones' targets: put the loop's body in an LS_MULTIVERSION function and call it from
// the region once per thread's range.
#ifndef LOCKSTEP_WORKERS_CPU_MULTIVERSION_H_
#define LOCKSTEP_WORKERS_CPU_MULTIVERSION_H_

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LS_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define LS_MULTIVERSION
#endif

// Functions with AVX-512F intrinsics: called only where HasAvx512().
#if defined(__x86_64__) && defined(__GNUC__)
#define LS_AVX512 __attribute__((target("avx512f")))
#endif

// Functions with AVX-512 BF16 instructions (vdpbf16ps, vcvtneps2bf16) and the AVX-512
// subsets used beside them: called only where the CPU has every one (HasAvx512Bf16).
#if defined(__x86_64__) && defined(__GNUC__)
#define LS_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#endif

namespace lockstep::cpu {

// Whether this CPU runs LS_AVX512 functions (checked once).
inline bool HasAvx512() {
#if defined(LS_AVX512)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
#else
  return false;
#endif
}

// Whether this CPU runs LS_AVX512_BF16 functions (checked once).
inline bool HasAvx512Bf16() {
#if defined(LS_AVX512_BF16)
  static const bool bf16 = __builtin_cpu_supports("avx512bf16") &&
                           __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return bf16;
#else
  return false;
#endif
}

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_MULTIVERSION_H_
