#include "common/workload_contract.h"

namespace kubetrain::contract {

ExitClass ClassifyExit(int code) {
  if (code == 0) return ExitClass::kSuccess;
  if (code >= 1 && code <= 127) return ExitClass::kPermanent;
  return ExitClass::kRetryable;
}

}  // namespace kubetrain::contract
