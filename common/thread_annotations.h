// Clang's thread-safety annotations (-Wthread-safety), as macros that expand
// to nothing under other compilers. The shape of LevelDB's
// port/thread_annotations.h and abseil's base/thread_annotations.h, written here.
//
// Use them on the annotated types of common/mutex.h (libstdc++'s std::mutex
// carries no annotations, so a GUARDED_BY(std::mutex) member is never checked):
//
//   Mutex mu_;
//   int count_ GUARDED_BY(mu_) = 0;
//   void BumpLocked() REQUIRES(mu_);
//   void Bump() EXCLUDES(mu_) { MutexLock lock(mu_); BumpLocked(); }
//
// The check: `cmake --preset clang-tsa` builds the tree with clang++ and
// -Wthread-safety -Werror; the unit test `tsa.check` compiles only the
// translation units that use these annotations (tests/tools/tsa-check).
#pragma once

#if defined(__clang__)
#define KT_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define KT_THREAD_ANNOTATION(x)
#endif

// A type that is a lock ("mutex"), or an RAII holder of one.
#define CAPABILITY(x) KT_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY KT_THREAD_ANNOTATION(scoped_lockable)

// Data members: read and written only with the lock held (PT_: the pointee).
#define GUARDED_BY(x) KT_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) KT_THREAD_ANNOTATION(pt_guarded_by(x))

// Lock order between two locks.
#define ACQUIRED_BEFORE(...) KT_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) KT_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))

// Functions: the caller must hold the lock (exclusively / shared), or must not.
#define REQUIRES(...) KT_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) KT_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define EXCLUDES(...) KT_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// Functions that take or give up a lock.
#define ACQUIRE(...) KT_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) KT_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) KT_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) KT_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) KT_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) KT_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define TRY_ACQUIRE_SHARED(...) KT_THREAD_ANNOTATION(try_acquire_shared_capability(__VA_ARGS__))

// Tells the analysis the lock is held here (checked at run time, if at all, by the callee).
#define ASSERT_CAPABILITY(x) KT_THREAD_ANNOTATION(assert_capability(x))
#define ASSERT_SHARED_CAPABILITY(x) KT_THREAD_ANNOTATION(assert_shared_capability(x))

// A function returning a reference to a lock.
#define RETURN_CAPABILITY(x) KT_THREAD_ANNOTATION(lock_returned(x))

// Turns the analysis off for one function: say why beside it.
#define NO_THREAD_SAFETY_ANALYSIS KT_THREAD_ANNOTATION(no_thread_safety_analysis)
