// A non-owning reference to a callable, for callbacks that are only called during the call that
// receives them (ThreadPool::ParallelFor). Unlike std::function it never allocates: it stores a
// pointer to the caller's callable and a trampoline that knows its type. The callable must
// outlive the FunctionRef (a lambda passed as an argument does).
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace g4 {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
             std::is_invocable_r_v<R, F&, Args...>)
  FunctionRef(F&& f)  // NOLINT: implicit, so a lambda converts at the call site
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::add_pointer_t<std::remove_reference_t<F>>>(object))(
              std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace g4
