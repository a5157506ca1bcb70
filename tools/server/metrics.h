// GET /metrics: the generator's counters and gauges as Prometheus text.
#pragma once

#include <string>

#include "tessera/serving/serving.h"

namespace tessera::server {

std::string prometheus_text(const serving::GeneratorMetrics& m);

}  // namespace tessera::server
