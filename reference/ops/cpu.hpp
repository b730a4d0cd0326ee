// The ops' earlier header name, kept so that the files which include it still build: the ops
// are declared in reference/ops/ops.hpp (for both devices); new code includes that.
#pragma once

#include "reference/ops/ops.hpp"
