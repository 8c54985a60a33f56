// kiln's error types. Every failure a user can cause is an exception derived from kiln::Error;
// the message starts with the op in brackets and names the offending values, e.g.
//   [add] shapes [2, 3] and [4, 3] cannot be broadcast
#pragma once

#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

#define KILN_DEFINE_ERROR(Name) \
  class Name : public Error {   \
   public:                      \
    using Error::Error;         \
  };

// Tensors on different devices were combined.
KILN_DEFINE_ERROR(DeviceMismatch)
// An element type did not match what the op or the caller expected.
KILN_DEFINE_ERROR(DTypeMismatch)
// Shapes cannot be combined (broadcasting, matmul, cat, ...).
KILN_DEFINE_ERROR(ShapeMismatch)
// The device cannot store or compute with the requested dtype.
KILN_DEFINE_ERROR(UnsupportedDType)
// A one-time setting was changed after first use.
KILN_DEFINE_ERROR(AlreadyInitialized)
// The backend was not compiled into this build of kiln.
KILN_DEFINE_ERROR(NotCompiled)
// The backend is built in but no device is usable here (no driver, no GPU, no server).
KILN_DEFINE_ERROR(BackendUnavailable)
// A backend could not allocate memory even after releasing its caches.
KILN_DEFINE_ERROR(OutOfMemory)
// A deferred device failure, surfaced when a result is read; names the op that failed.
KILN_DEFINE_ERROR(ExecutionError)
// KILN_FUSION_CHECK=1: a fused group's result differs from the same ops run one by one; the
// message names the group's ops and prints it.
KILN_DEFINE_ERROR(FusionMismatch)
// Misuse of automatic differentiation.
KILN_DEFINE_ERROR(AutodiffError)
// An argument value is out of its valid range (dims, sizes, options, ...).
KILN_DEFINE_ERROR(InvalidArgument)
// A remote peer sent a malformed or unexpected frame.
KILN_DEFINE_ERROR(ProtocolError)
// A remote server refused the token (missing or wrong).
KILN_DEFINE_ERROR(AuthenticationFailed)
// The backend does not implement this op and the op has no default.
KILN_DEFINE_ERROR(UnsupportedOperation)
// A collective failed across processes (kiln/distributed.h): the ranks called different
// collectives, or one did not answer within the group's timeout. The message names the
// collective, its sequence number and the ranks; the group is unusable afterwards.
KILN_DEFINE_ERROR(DistributedError)

#undef KILN_DEFINE_ERROR

}  // namespace kiln
