// A stand-in for Gloo's gloo/common/memory.h, which Debian's libgloo-dev
// (0.0~git20220518.5b14351) does not install although its gloo/transport/tcp/pair.h,
// context.h and unbound_buffer.h include it. Those headers need three pointer wrappers
// from it; this declares them with the layout the library was built with (one
// std::shared_ptr or std::weak_ptr each), which is all that lockstep's code depends on:
// it subclasses tcp::Pair and tcp::Context (workers/gloo/auth_transport.cc, which checks
// sizeof(tcp::Pair) and sizeof(tcp::Context) against the library's at compile time) and
// never calls these wrappers itself. workers/CMakeLists.txt puts this folder on the
// include path only when the system has no gloo/common/memory.h of its own.
#ifndef LOCKSTEP_WORKERS_GLOO_COMPAT_GLOO_COMMON_MEMORY_H_
#define LOCKSTEP_WORKERS_GLOO_COMPAT_GLOO_COMMON_MEMORY_H_

#include <memory>
#include <utility>

namespace gloo {

// A shared_ptr that does not own what it points to (the pointee's owner keeps it alive).
template <typename T>
class NonOwningPtr final {
 public:
  NonOwningPtr() = default;
  explicit NonOwningPtr(std::shared_ptr<T> ptr) : ptr_(std::move(ptr)) {}
  T* get() const { return ptr_.get(); }
  T* operator->() const { return ptr_.get(); }
  explicit operator bool() const { return ptr_ != nullptr; }

 private:
  std::shared_ptr<T> ptr_;
};

// Held by an object to hand out WeakNonOwningPtrs to itself.
template <typename T>
class ShareableNonOwningPtr final {
 public:
  explicit ShareableNonOwningPtr(T* ptr) : ptr_(ptr, [](T*) {}) {}

 private:
  template <typename U>
  friend class WeakNonOwningPtr;
  std::shared_ptr<T> ptr_;
};

// A weak reference to an object holding a ShareableNonOwningPtr to itself.
template <typename T>
class WeakNonOwningPtr final {
 public:
  WeakNonOwningPtr() = default;
  explicit WeakNonOwningPtr(const ShareableNonOwningPtr<T>& ptr) : ptr_(ptr.ptr_) {}
  NonOwningPtr<T> lock() const { return NonOwningPtr<T>(ptr_.lock()); }

 private:
  std::weak_ptr<T> ptr_;
};

}  // namespace gloo

#endif  // LOCKSTEP_WORKERS_GLOO_COMPAT_GLOO_COMMON_MEMORY_H_
