// MpiWorld in a build without MPI: a world of one rank. A process that an
// MPI launcher started is told how to get a build that joins its job.
#include <unistd.h>

#include <cstdlib>

#include "tessera/core/error.h"
#include "tessera/dist/mpi.h"

namespace tessera {

struct MpiWorld::State {
  std::string host;
};

bool MpiWorld::built() { return false; }

MpiWorld::MpiWorld(int&, char**&) : state_(std::make_unique<State>()) {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  state_->host = name;
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (size != nullptr && std::atoi(size) > 1) {
    fail(ErrorCategory::kUnsupported,
         "[mpi] started as one of {} MPI ranks, but this build has no MPI; install libopenmpi-dev "
         "and configure with -DTESSERA_MPI=ON",
         size);
  }
}

MpiWorld::~MpiWorld() = default;

int MpiWorld::rank() const { return 0; }
int MpiWorld::size() const { return 1; }
const std::string& MpiWorld::host() const { return state_->host; }
Transport* MpiWorld::transport() const { return nullptr; }
void MpiWorld::abort(int code) const { std::_Exit(code); }

}  // namespace tessera
