// `mpirun -np N tessera run|perplexity|serve` against the same command in
// one process: the same greedy text, the same perplexity, the same text for
// each of several concurrent streams; and the start-up faults: a rank that
// cannot load, ranks with different files, a command that runs in one
// process only. Each ends every rank with one message.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <thread>

#include <future>

#include <nlohmann/json.hpp>

#include "tools/run_command.h"
#include "tools/server_process.h"

namespace tessera::testing {
namespace {

// Open MPI keeps allocations past MPI_Finalize. Under LeakSanitizer the
// processes this test starts (inheriting the environment) take the
// suppressions for it, with full stacks so frames inside its plugins match.
const bool kLsanOptions = [] {
  setenv("LSAN_OPTIONS",
         "suppressions=" TESSERA_SOURCE_DIR "/tests/dist/lsan_openmpi.supp:print_suppressions=0:"
         "fast_unwind_on_malloc=0",
         /*overwrite=*/0);
  return true;
}();

std::string tessera(const std::string& args) { return std::string(TESSERA_BIN) + " " + args; }
// Open MPI as CI runs it: as root, more ranks than cores.
std::string fmt_mpirun() { return std::string(TESSERA_MPIEXEC) + " --allow-run-as-root --oversubscribe"; }
std::string mpirun(int np, const std::string& args) {
  return fmt_mpirun() + " -np " + std::to_string(np) + " " + tessera(args);
}
std::string stories() { return models_dir() + "/stories260K.gguf"; }
std::string fixture(const std::string& arch) { return fixtures_dir() + "/archs/" + arch + ".gguf"; }
std::string story() { return std::string(TESSERA_SOURCE_DIR) + "/tests/data/story.txt"; }

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

class MpiRun : public ::testing::TestWithParam<int> {};

TEST_P(MpiRun, GreedyTextEqualsOneProcess) {
  for (const std::string& model : {stories(), fixture("gemma3"), fixture("qwen2")}) {
    SCOPED_TRACE(model);
    const std::string args = "run -m " + model + " -p 'Once upon a time' -n 24 --temp 0 -c 128";
    const CommandResult one = run_command(tessera(args));
    ASSERT_EQ(one.exit_code, 0) << one.err;
    const CommandResult split = run_command(mpirun(GetParam(), args));
    ASSERT_EQ(split.exit_code, 0) << split.err;
    EXPECT_EQ(split.out, one.out);
    EXPECT_EQ(count(split.err, "pipeline: " + std::to_string(GetParam()) + " ranks"), 1u) << split.err;
  }
}

TEST_P(MpiRun, ParallelSequencesEqualOneProcess) {
  const std::string args =
      "run -m " + stories() + " -p 'One day' -n 16 --temp 0.8 -s 3 -np 3 --no-display-prompt";
  const CommandResult one = run_command(tessera(args));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const CommandResult split = run_command(mpirun(GetParam(), args));
  ASSERT_EQ(split.exit_code, 0) << split.err;
  EXPECT_EQ(split.out, one.out);
}

TEST_P(MpiRun, ChatRepliesEqualOneProcess) {
  // mpirun hands stdin to rank 0, which runs the conversation.
  const std::string in = "printf 'Hello\\nTell me a story\\n' | ";
  const std::string args = "chat -m " + stories() + " --temp 0 -n 24";
  const CommandResult one = run_command(in + tessera(args));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const CommandResult split = run_command(in + mpirun(GetParam(), args));
  ASSERT_EQ(split.exit_code, 0) << split.err;
  EXPECT_FALSE(one.out.empty());
  EXPECT_EQ(split.out, one.out);
}

TEST_P(MpiRun, PerplexityEqualsOneProcess) {
  const std::string args = "perplexity -m " + stories() + " -f " + story() + " -c 128 -b 48";
  const CommandResult one = run_command(tessera(args));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const CommandResult split = run_command(mpirun(GetParam(), args));
  ASSERT_EQ(split.exit_code, 0) << split.err;
  EXPECT_NE(one.out.find("Final estimate: PPL = "), std::string::npos) << one.out;
  EXPECT_EQ(split.out, one.out);
}

pid_t find_rank(const std::string& marker, int rank);

// The server on a pipeline keeps several groups of slots in flight; four
// concurrent streams each get the text they get alone from one process.
TEST_P(MpiRun, ServeGivesConcurrentStreamsTheirSoloText) {
  using nlohmann::json;
  const std::vector<std::string> prompts = {"Once upon a time", "Lily and Tom went",
                                            "The little dog", "One day, a bird"};
  auto complete = [](const ServerProcess& s, const std::string& prompt) {
    const json body = {{"prompt", prompt}, {"max_tokens", 32}, {"temperature", 0}};
    auto r = s.client().Post("/v1/completions", body.dump(), "application/json");
    if (!r || r->status != 200) return std::string("request failed: ") + (r ? r->body : "no answer");
    return json::parse(r->body)["choices"][0]["text"].get<std::string>();
  };
  std::vector<std::string> solo;
  {
    const ServerProcess one({"-m", stories(), "-np", "4", "-c", "512"});
    for (const std::string& p : prompts) solo.push_back(complete(one, p));
  }
  std::vector<std::string> mpi = {std::string(TESSERA_MPIEXEC), "--allow-run-as-root",
                                  "--oversubscribe", "-np", std::to_string(GetParam())};
  const std::string marker = "serve-mark-" + std::to_string(::getpid()) + "-" + std::to_string(GetParam());
  ServerProcess split({"-m", stories(), "-np", "4", "-c", "8192", "--alias", marker}, mpi);
  std::vector<std::future<std::string>> streams;
  for (const std::string& p : prompts) {
    streams.push_back(std::async(std::launch::async, [&, p] { return complete(split, p); }));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string text = streams[i].get();
    EXPECT_FALSE(solo[i].empty()) << prompts[i];
    EXPECT_EQ(text, solo[i]) << prompts[i];
  }
  EXPECT_NE(split.log().find("pipeline: " + std::to_string(GetParam()) + " ranks"), std::string::npos)
      << split.log();
  // Embeddings would need a second thread on the pipeline: refused, named.
  auto r = split.client().Post("/v1/embeddings", R"({"input":"hello"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_NE(r->status, 200);
  EXPECT_NE(r->body.find("split across"), std::string::npos) << r->body;
  // SIGTERM to rank 0 (as its "ready" line says): it finishes the stream in
  // flight (its last chunk and [DONE]), then stops the workers, and the job
  // ends cleanly. (mpirun's own SIGTERM ends the job at once: Open MPI's way.)
  std::string raw;
  std::atomic<bool> started{false};
  std::thread stream([&] {
    httplib::Client c = split.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = R"({"prompt":"Once upon a time","max_tokens":1900,"ignore_eos":true,"stream":true})";
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      raw.append(data, n);
      started = true;
      return true;
    };
    c.send(req);
  });
  for (int i = 0; i < 500 && !started; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const pid_t rank0 = find_rank(marker, 0);
  ASSERT_NE(rank0, 0);
  EXPECT_NE(split.log().find("SIGTERM to rank 0 (pid " + std::to_string(rank0) + ")"), std::string::npos)
      << split.log();
  ::kill(rank0, SIGTERM);
  stream.join();
  EXPECT_EQ(split.wait_exit(), 0) << split.log();
  EXPECT_NE(raw.find("\"finish_reason\""), std::string::npos) << raw.substr(0, 400);
  EXPECT_NE(raw.find("data: [DONE]"), std::string::npos) << raw.substr(raw.size() > 400 ? raw.size() - 400 : 0);
}

INSTANTIATE_TEST_SUITE_P(Ranks, MpiRun, ::testing::Values(2, 3),
                         [](const auto& p) { return "np" + std::to_string(p.param); });

TEST(MpiFaults, OneRankIsTheSameAsNoMpi) {
  const std::string args = "run -m " + stories() + " -p 'Once upon a time' -n 12 --temp 0";
  const CommandResult one = run_command(tessera(args));
  const CommandResult mpi = run_command(mpirun(1, args));
  ASSERT_EQ(mpi.exit_code, 0) << mpi.err;
  EXPECT_EQ(mpi.out, one.out);
  EXPECT_EQ(mpi.err.find("pipeline"), std::string::npos) << mpi.err;
}

// Two programs in one job (Open MPI's MPMD form): rank 0 with `a`, rank 1 with `b`.
std::string mpmd(const std::string& a, const std::string& b) {
  return fmt_mpirun() + " -np 1 " + tessera(a) + " : -np 1 " + tessera(b);
}

TEST(MpiFaults, ARankThatCannotLoadEndsEveryRankWithOneMessage) {
  const std::string run = " -p 'Once upon a time' -n 4 --temp 0";
  const CommandResult r =
      run_command(mpmd("run -m " + stories() + run, "run -m /nonexistent/model.gguf" + run));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count(r.err, "tessera: error:"), 1u) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(\[rank 1 on [^\]]+\] .*/nonexistent/model\.gguf)")))
      << r.err;
  EXPECT_EQ(r.err.find("[rank 0 on"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(MpiFaults, DifferentModelFilesAreRefusedAtStart) {
  const std::string run = " -p 'Once upon a time' -n 4 --temp 0";
  const CommandResult r =
      run_command(mpmd("run -m " + stories() + run, "run -m " + fixture("llama") + run));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count(r.err, "tessera: error:"), 1u) << r.err;
  EXPECT_NE(r.err.find("model files differ"), std::string::npos) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(\[rank 1 on [^\]]+\] .*llama\.gguf: \d+ bytes, header hash [0-9a-f]{16}; rank 0's: \d+ bytes)"))) << r.err;
}

TEST(MpiFaults, MoreRanksThanLayersIsAnError) {
  // stories260K has 5 layers.
  const CommandResult r = run_command(mpirun(6, "run -m " + stories() + " -p 'Once' -n 4 --temp 0"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count(r.err, "tessera: error:"), 1u) << r.err;
  EXPECT_NE(r.err.find("6 ranks for a model of 5 layers"), std::string::npos) << r.err;
}

TEST(MpiFaults, ASplitOfTheWrongLengthNamesTheFlag) {
  const CommandResult r = run_command(
      mpirun(2, "run -m " + stories() + " -p 'Once' -n 4 --temp 0 --split-ranks 1,2,3"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count(r.err, "tessera: error:"), 1u) << r.err;
  EXPECT_NE(r.err.find("[--split-ranks] 3 proportions for 2 ranks"), std::string::npos) << r.err;
}

TEST(MpiFaults, ACommandThatRunsInOneProcessSaysSo) {
  const CommandResult r = run_command(mpirun(2, "bench -m " + stories()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count(r.err, "tessera: error:"), 1u) << r.err;
  EXPECT_NE(r.err.find("'bench' runs in one process"), std::string::npos) << r.err;
}

TEST(MpiFaults, AFrontErrorBeforeLoadingEndsTheJob) {
  // rank 0 fails reading -f while the others wait to load: the job ends.
  const CommandResult r =
      run_command(mpirun(2, "run -m " + stories() + " -f /nonexistent/prompt.txt -n 4"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count(r.err, "tessera: error:"), 1u) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/prompt.txt"), std::string::npos) << r.err;
}

// The pid of the process whose command line holds `marker` and whose
// environment says it is MPI rank `rank`, or 0.
pid_t find_rank(const std::string& marker, int rank) {
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    auto slurp = [&](const char* what) {
      std::ifstream in(entry.path() / what, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    };
    const std::string cmdline = slurp("cmdline");
    if (cmdline.find(marker) == std::string::npos || cmdline.find("mpirun") != std::string::npos) continue;
    const std::string env = slurp("environ");
    for (size_t at = 0; at < env.size(); at = env.find('\0', at) + 1) {
      if (env.compare(at, want.size() + 1, want + '\0') == 0) return std::stoi(name);
      if (env.find('\0', at) == std::string::npos) break;
    }
  }
  return 0;
}

TEST(MpiFaults, ARankKilledMidRunEndsTheJob) {
  // A generation that would take minutes (64k cells, no end of text), on 2
  // ranks; rank 1 is killed as soon as it exists. ctest's timeout guards a hang.
  const std::string marker = "killed-rank-test-" + std::to_string(::getpid());
  CommandResult r;
  std::thread job([&] {
    r = run_command(mpirun(2, "run -m " + stories() + " -p '" + marker +
                                  "' -n 1000000 --ignore-eos -c 65536 --temp 0 --no-display-prompt"));
  });
  pid_t pid = 0;
  for (int i = 0; i < 600 && pid == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pid = find_rank(marker, 1);
  }
  ASSERT_NE(pid, 0) << "rank 1 never started";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // past loading, most likely
  ::kill(pid, SIGKILL);
  job.join();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(rank 1 .*on node \S+ exited on signal 9)"))) << r.err;
}

}  // namespace
}  // namespace tessera::testing
