// Hot loops are compiled for AVX-512, AVX2 and baseline x86-64 and picked at load time,
// so one portable binary runs at the host's vector width. Vectorizing changes no result:
// the operations and their order per element are the same (-ffp-contract=off, no
// reassociation: a loop-carried float sum stays scalar, in order).
//
// OpenMP regions are outlined into functions of their own, which do not inherit the
// clones' targets: put the loop's body in an LS_MULTIVERSION function and call it from
// the region once per thread's range.
#ifndef LOCKSTEP_WORKERS_CPU_MULTIVERSION_H_
#define LOCKSTEP_WORKERS_CPU_MULTIVERSION_H_

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LS_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LS_MULTIVERSION
#endif

#endif  // LOCKSTEP_WORKERS_CPU_MULTIVERSION_H_
