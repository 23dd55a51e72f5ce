#pragma once
// Clang's thread-safety attributes, for the lock rules the compiler checks
// (scripts/check-thread-safety.sh: clang -Wthread-safety over the files
// that use them; docs/architecture.md, "Threads and locks"). Under GCC
// they expand to nothing. Attributes can only be spelled as macros, so
// these are the only macros for it, kept to what the code uses:
//
//   SWITCHYARD_GUARDED_BY(mu)      on a field: read or written holding mu only
//   SWITCHYARD_PT_GUARDED_BY(mu)   on a pointer field: what it points to, ditto
//   SWITCHYARD_REQUIRES(mu...)     on a function: its caller holds mu
//   SWITCHYARD_EXCLUDES(mu...)     on a function: its caller does not hold mu
//                                  (the function takes it)
//   SWITCHYARD_CAPABILITY(name)    on a class: it is a lock (switchyard::mutex)
//   SWITCHYARD_SCOPED_CAPABILITY   on a class: holds a lock for its lifetime
//   SWITCHYARD_ACQUIRE/RELEASE/TRY_ACQUIRE(...)
//                                  on a lock's (or scoped lock's) functions
//   SWITCHYARD_NO_THREAD_SAFETY_ANALYSIS
//                                  on a function the analysis cannot follow;
//                                  its comment says why it is safe
//
// The analysis needs annotated locks: switchyard::mutex and its scoped
// locks (common/mutex.hpp), not std::mutex.

#if defined(__clang__)
#define SWITCHYARD_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define SWITCHYARD_THREAD_ANNOTATION_(x)
#endif

#define SWITCHYARD_CAPABILITY(name) SWITCHYARD_THREAD_ANNOTATION_(capability(name))
#define SWITCHYARD_SCOPED_CAPABILITY SWITCHYARD_THREAD_ANNOTATION_(scoped_lockable)
#define SWITCHYARD_GUARDED_BY(x) SWITCHYARD_THREAD_ANNOTATION_(guarded_by(x))
#define SWITCHYARD_PT_GUARDED_BY(x) SWITCHYARD_THREAD_ANNOTATION_(pt_guarded_by(x))
#define SWITCHYARD_REQUIRES(...) SWITCHYARD_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define SWITCHYARD_EXCLUDES(...) SWITCHYARD_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#define SWITCHYARD_ACQUIRE(...) SWITCHYARD_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define SWITCHYARD_TRY_ACQUIRE(...) SWITCHYARD_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
#define SWITCHYARD_RELEASE(...) SWITCHYARD_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define SWITCHYARD_NO_THREAD_SAFETY_ANALYSIS SWITCHYARD_THREAD_ANNOTATION_(no_thread_safety_analysis)
