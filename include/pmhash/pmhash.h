// pmhash/pmhash.h — umbrella header of the public API.
#pragma once

#include "pmhash/index.h"
#include "pmhash/options.h"
#include "pmhash/stats.h"
#include "pmhash/status.h"
