// MpiWorld: the MPI job this process is a rank of (Open MPI's mpirun, Slurm).
// Owns MPI's start and finalize; its transport moves the pipeline's
// messages (pipeline.h). A process not started by an MPI launcher, and any
// process of a build without MPI (configure finds none, or TESSERA_MPI=OFF),
// is a world of one rank and never touches MPI.
#pragma once

#include <memory>
#include <string>

#include "tessera/engine/pipeline.h"

namespace tessera {

class MpiWorld {
 public:
  // Starts MPI (threads: serialized) when an MPI launcher started this process.
  MpiWorld(int& argc, char**& argv);
  ~MpiWorld();  // MPI_Finalize
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  static bool built();  // this build has MPI
  int rank() const;
  int size() const;
  const std::string& host() const;
  // The transport between the ranks; null in a world of one.
  Transport* transport() const;
  // Ends every rank of the job at once (MPI_Abort): for a failure on one
  // rank that the others may be waiting on.
  [[noreturn]] void abort(int code) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tessera
