// The pipeline's protocol over a Transport: the front's calls (open, pass,
// shift, close, stop) and the workers' command loop. Messages are flat
// bytes: a header (kind, context id), then the command's fields; arrays
// carry their length first.
#include "tessera/engine/pipeline.h"

#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

#include "tessera/core/error.h"
#include "tessera/engine/engine.h"

namespace tessera {
namespace {

enum class Kind : uint32_t {
  kOpen = 1,    // context options            -> reply kOk
  kClose = 2,   // -                          -> no reply
  kPass = 3,    // PassInputs, hidden state   -> reply kOutput
  kShift = 4,   // shifts per cache row       -> reply kOk
  kStop = 5,    // -                          -> no reply; serve() returns
  kOk = 6,
  kOutput = 7,  // floats
  kError = 8,   // text naming the rank and host
};

class Writer {
 public:
  explicit Writer(std::vector<std::byte>& out) : out_(out) {}
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    append(&v, sizeof(T));
  }
  template <class T>
  void put_array(std::span<const T> a) {
    put(static_cast<uint64_t>(a.size()));
    append(a.data(), a.size_bytes());
  }
  void put_text(const std::string& s) { put_array(std::span<const char>(s.data(), s.size())); }

 private:
  void append(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = out_.size();
    out_.resize(at + n);
    std::memcpy(out_.data() + at, p, n);
  }
  std::vector<std::byte>& out_;
};

class Reader {
 public:
  Reader(std::span<const std::byte> in, int from) : in_(in), from_(from) {}
  template <class T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  template <class T>
  void get_array(std::vector<T>& out) {
    const auto n = get<uint64_t>();
    if (n > in_.size() / sizeof(T)) short_message();
    out.resize(static_cast<size_t>(n));
    const std::byte* p = take(static_cast<size_t>(n) * sizeof(T));
    if (n > 0) std::memcpy(out.data(), p, out.size() * sizeof(T));  // an empty vector's data() may be null
  }
  std::string get_text() {
    std::vector<char> c;
    get_array(c);
    return std::string(c.begin(), c.end());
  }
  size_t position() const { return pos_; }

 private:
  const std::byte* take(size_t n) {
    if (n > in_.size() - pos_) short_message();
    const std::byte* p = in_.data() + pos_;
    pos_ += n;
    return p;
  }
  [[noreturn]] void short_message() const {
    fail(ErrorCategory::kDevice, "[pipeline] a message of {} bytes from rank {} ends early",
         in_.size(), from_);
  }
  std::span<const std::byte> in_;
  int from_;
  size_t pos_ = 0;
};

void put_header(std::vector<std::byte>& m, Kind kind, uint32_t context) {
  m.clear();
  Writer w(m);
  w.put(kind);
  w.put(context);
}

void put_inputs(Writer& w, const PassInputs& p) {
  for (int64_t v : {p.n, p.n_tokens, p.n_kv, p.n_out, p.n_out_rows}) w.put(v);
  w.put_array<int32_t>(p.tokens);
  w.put_array<int32_t>(p.positions);
  w.put_array<int64_t>(p.kv_idx);
  w.put_array<float>(p.mask);
  w.put_array<float>(p.mask_swa);
  w.put_array<int32_t>(p.out_ids);
}

void get_inputs(Reader& r, PassInputs& p) {
  for (int64_t* v : {&p.n, &p.n_tokens, &p.n_kv, &p.n_out, &p.n_out_rows}) *v = r.get<int64_t>();
  r.get_array(p.tokens);
  r.get_array(p.positions);
  r.get_array(p.kv_idx);
  r.get_array(p.mask);
  r.get_array(p.mask_swa);
  r.get_array(p.out_ids);
  const auto nt = static_cast<size_t>(p.n_tokens);
  const bool ok = p.n >= 1 && p.n <= p.n_tokens && p.tokens.size() == nt &&
                  p.positions.size() == nt && p.kv_idx.size() == nt &&
                  p.mask.size() == nt * static_cast<size_t>(p.n_kv) &&
                  (p.mask_swa.empty() || p.mask_swa.size() == p.mask.size()) &&
                  p.n_out >= 0 && p.n_out <= p.n_out_rows &&
                  p.out_ids.size() == static_cast<size_t>(p.n_out_rows);
  if (!ok) fail(ErrorCategory::kDevice, "[pipeline] a pass whose inputs do not fit its shape");
}

uint64_t bytes_with_prefix(const gguf::File& file, std::string_view prefix) {
  uint64_t sum = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.name.starts_with(prefix)) sum += t.nbytes;
  }
  return sum;
}

}  // namespace

std::string rank_name(const Transport&, int rank, const std::string& host) {
  return fmt::format("[rank {} on {}]", rank, host);
}

std::vector<LayerRange> split_layers(const gguf::File& file, int64_t n_layer, int n_stages,
                                     std::span<const double> proportions,
                                     const std::string& flag) {
  if (n_stages < 1 || n_stages > n_layer) {
    fail(ErrorCategory::kInvalidArgument,
         "[pipeline] {} ranks for a model of {} layers: each rank needs at least one layer",
         n_stages, n_layer);
  }
  std::vector<double> share(static_cast<size_t>(n_stages), 1.0);
  if (!proportions.empty()) {
    if (proportions.size() != static_cast<size_t>(n_stages)) {
      fail(ErrorCategory::kInvalidArgument, "[{}] {} proportions for {} ranks", flag,
           proportions.size(), n_stages);
    }
    for (size_t i = 0; i < proportions.size(); ++i) {
      if (!(proportions[i] > 0) || !std::isfinite(proportions[i])) {
        fail(ErrorCategory::kInvalidArgument, "[{}] proportion {} is {}, expected > 0", flag, i,
             proportions[i]);
      }
    }
    share.assign(proportions.begin(), proportions.end());
  }
  // Bytes before the end of layer il: the embedding counts to layer 0, the
  // head to the last layer (every layer at least 1, so empty files split too).
  std::vector<double> cum(static_cast<size_t>(n_layer) + 1, 0.0);
  for (int64_t il = 0; il < n_layer; ++il) {
    double bytes = double(std::max<uint64_t>(bytes_with_prefix(file, fmt::format("blk.{}.", il)), 1));
    if (il == 0) bytes += double(bytes_with_prefix(file, "token_embd."));
    if (il == n_layer - 1) bytes += double(bytes_with_prefix(file, "output"));
    cum[static_cast<size_t>(il) + 1] = cum[static_cast<size_t>(il)] + bytes;
  }
  const double total_share = std::accumulate(share.begin(), share.end(), 0.0);
  std::vector<LayerRange> out;
  int64_t begin = 0;
  double before = 0.0;
  for (int r = 0; r < n_stages; ++r) {
    int64_t end = n_layer;
    if (r + 1 < n_stages) {
      before += share[static_cast<size_t>(r)];
      const double target = cum.back() * before / total_share;
      // The boundary nearest the target that leaves a layer to each rank.
      const int64_t lo = begin + 1, hi = n_layer - (n_stages - r - 1);
      end = lo;
      for (int64_t b = lo; b <= hi; ++b) {
        if (std::abs(cum[static_cast<size_t>(b)] - target) <
            std::abs(cum[static_cast<size_t>(end)] - target)) {
          end = b;
        }
      }
    }
    out.push_back({begin, end});
    begin = end;
  }
  return out;
}

Pipeline::Pipeline(Transport& transport, std::vector<LayerRange> ranges)
    : transport_(transport), ranges_(std::move(ranges)) {
  TESSERA_CHECK(ranges_.size() == static_cast<size_t>(transport_.size()),
                "{} layer ranges for {} ranks", ranges_.size(), transport_.size());
}

Pipeline::~Pipeline() {
  if (!is_front() || size() < 2 || !started_) return;
  try {
    std::vector<std::byte> m;
    put_header(m, Kind::kStop, 0);
    send_down(std::move(m));
    transport_.flush();
    transport_.mark_peers_done();
  } catch (const std::exception&) {
    // The job is ending; the transport reports what failed.
  }
}

void Pipeline::send_to(int to, std::vector<std::byte>&& message) {
  bytes_sent_ += message.size();
  transport_.send(to, std::move(message));
}

void Pipeline::send_down(std::vector<std::byte>&& message) { send_to(rank() + 1, std::move(message)); }

// The last rank's answer to a command: kOk, kOutput (copied to `out`, which
// must be its size) or kError (thrown).
void Pipeline::await_reply(std::span<float> out, uint32_t context) {
  const int last = size() - 1;
  transport_.recv(last, reply_);
  Reader r(reply_, last);
  const auto kind = r.get<Kind>();
  const auto id = r.get<uint32_t>();
  if (kind == Kind::kError) fail(ErrorCategory::kDevice, "{}", r.get_text());
  if (context != 0 && id != context) {
    fail(ErrorCategory::kDevice, "[pipeline] an answer for context {} where context {} waits", id,
         context);
  }
  if (kind == Kind::kOk && out.empty()) return;
  if (kind != Kind::kOutput) {
    fail(ErrorCategory::kDevice, "[pipeline] rank {} answered with message kind {}", last,
         static_cast<uint32_t>(kind));
  }
  const auto n = r.get<uint64_t>();
  if (n != out.size() || reply_.size() - r.position() != n * sizeof(float)) {
    fail(ErrorCategory::kDevice, "[pipeline] rank {} sent {} output floats, expected {}", last, n,
         out.size());
  }
  if (!out.empty()) std::memcpy(out.data(), reply_.data() + r.position(), out.size_bytes());
}

uint32_t Pipeline::open(const ContextOptions& o) {
  TESSERA_CHECK(in_flight_ == 0, "open with {} passes in flight", in_flight_);
  const uint32_t id = next_context_++;
  std::vector<std::byte> m;
  put_header(m, Kind::kOpen, id);
  Writer w(m);
  w.put(o.n_ctx);
  w.put(o.n_batch);
  w.put(static_cast<int32_t>(o.type_k));
  w.put(static_cast<int32_t>(o.type_v));
  w.put(static_cast<uint8_t>(o.embeddings));
  send_down(std::move(m));
  try {
    await_reply({});
  } catch (...) {
    close(id);  // the ranks before the one that failed made theirs
    throw;
  }
  return id;
}

void Pipeline::close(uint32_t context) noexcept {
  try {
    std::vector<std::byte> m;
    put_header(m, Kind::kClose, context);
    send_down(std::move(m));
  } catch (const std::exception&) {
    // A transport that fails here fails the next command too, loudly.
  }
}

void Pipeline::send_pass(uint32_t context, const PassInputs& inputs, std::span<const float> hidden) {
  std::vector<std::byte> m;
  put_header(m, Kind::kPass, context);
  Writer w(m);
  put_inputs(w, inputs);
  w.put_array(hidden);
  send_down(std::move(m));
  ++in_flight_;
}

void Pipeline::receive_output(uint32_t context, std::span<float> out) {
  TESSERA_CHECK(in_flight_ > 0, "no pass in flight");
  --in_flight_;  // answered, output or error
  await_reply(out, context);
}

void Pipeline::pass(uint32_t context, const PassInputs& inputs, std::span<const float> hidden,
                    std::span<float> out) {
  send_pass(context, inputs, hidden);
  receive_output(context, out);
}

void Pipeline::shift(uint32_t context, std::span<const int32_t> shifts) {
  TESSERA_CHECK(in_flight_ == 0, "K shift with {} passes in flight", in_flight_);
  std::vector<std::byte> m;
  put_header(m, Kind::kShift, context);
  Writer(m).put_array(shifts);
  send_down(std::move(m));
  await_reply({});
}

void Pipeline::serve(const Model& model) {
  TESSERA_CHECK(!is_front(), "serve() runs on the workers");
  const int prev = rank() - 1;
  const std::string me = rank_name(transport_, rank(), transport_.host());
  std::map<uint32_t, std::unique_ptr<Context>> contexts;
  PassInputs inputs;
  std::vector<float> hidden, out;
  std::vector<std::byte> in;
  // The last rank answers rank 0; the others pass the message on.
  const auto reply = [&](Kind kind, uint32_t id, std::span<const float> floats) {
    std::vector<std::byte> m;
    put_header(m, kind, id);
    if (kind == Kind::kOutput) Writer(m).put_array(floats);
    send_to(0, std::move(m));
  };
  // A message goes on down the chain, or from the last rank back to rank 0.
  const auto forward = [&](std::vector<std::byte>&& m) { send_to(is_last() ? 0 : rank() + 1, std::move(m)); };
  const auto fail_down = [&](uint32_t id, const std::string& what) {
    std::vector<std::byte> m;
    put_header(m, Kind::kError, id);
    Writer(m).put_text(what);
    forward(std::move(m));
  };
  const auto context = [&](uint32_t id) -> Context& {
    auto it = contexts.find(id);
    if (it == contexts.end()) fail(ErrorCategory::kDevice, "[pipeline] no context {} here", id);
    return *it->second;
  };
  for (;;) {
    transport_.recv(prev, in);
    Reader r(in, prev);
    const auto kind = r.get<Kind>();
    const auto id = r.get<uint32_t>();
    switch (kind) {
      case Kind::kStop:
        if (!is_last()) send_down(std::move(in));
        transport_.flush();
        return;
      case Kind::kClose:
        contexts.erase(id);
        if (!is_last()) send_down(std::move(in));
        break;
      case Kind::kError:  // a rank before this one failed: pass it on
        forward(std::move(in));
        break;
      case Kind::kOpen:
      case Kind::kShift:
      case Kind::kPass:
        try {
          if (kind == Kind::kOpen) {
            ContextOptions o;
            o.n_ctx = r.get<int64_t>();
            o.n_batch = r.get<int64_t>();
            o.type_k = static_cast<DType>(r.get<int32_t>());
            o.type_v = static_cast<DType>(r.get<int32_t>());
            o.embeddings = r.get<uint8_t>() != 0;
            o.pipeline = this;
            contexts[id] = std::make_unique<Context>(model, o);
          } else if (kind == Kind::kShift) {
            std::vector<int32_t> shifts;
            r.get_array(shifts);
            context(id).rotate_keys(shifts);
          } else {
            get_inputs(r, inputs);
            const size_t hidden_at = r.position();
            r.get_array(hidden);
            context(id).run_stage(inputs, hidden, out);
            if (is_last()) {
              reply(Kind::kOutput, id, out);
            } else {
              in.resize(hidden_at);  // the same inputs, this stage's hidden state
              Writer(in).put_array<float>(out);
              send_down(std::move(in));
            }
            break;
          }
          if (is_last()) {
            reply(Kind::kOk, id, {});
          } else {
            send_down(std::move(in));
          }
        } catch (const std::exception& e) {  // Error, or std::bad_alloc
          fail_down(id, fmt::format("{} {}", me, e.what()));
        }
        break;
      default:
        fail_down(id, fmt::format("{} [pipeline] unknown command {} from rank {}", me,
                                  static_cast<uint32_t>(kind), prev));
    }
  }
}

}  // namespace tessera
