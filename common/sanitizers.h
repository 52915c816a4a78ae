// Which sanitizer this code is compiled under, as constants. GCC says so
// with __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__; clang 14 (the CI's
// sanitizer stages) only through __has_feature.
#pragma once

#if defined(__has_feature)
#define CORVID_HAS_FEATURE(x) __has_feature(x)
#else
#define CORVID_HAS_FEATURE(x) 0
#endif

namespace corvid {

#if defined(__SANITIZE_ADDRESS__) || CORVID_HAS_FEATURE(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif

#if defined(__SANITIZE_THREAD__) || CORVID_HAS_FEATURE(thread_sanitizer)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif

// Everything runs several times slower (tests shrink their longest loops).
inline constexpr bool kSanitizerBuild = kAddressSanitizer || kThreadSanitizer;

}  // namespace corvid

#undef CORVID_HAS_FEATURE
