// The global functions: raise_exception, strftime_now, namespace, range, dict.
// Nothing else is in scope: no file, environment, network or process access.
#include <cmath>
#include <ctime>

#include <fmt/format.h>

#include "jinja/builtin_util.h"
#include "jinja/interpreter.h"

namespace tessera::jinja {
namespace {

Value strftime_now(Interpreter& in, const Args& args) {
  args.check("strftime_now", 1, {"format"});
  const std::string& format =
      need_string(required(args, 0, "format", "strftime_now"), "strftime_now's format");
  if (format.size() > 256)
    throw Failure("found a strftime_now format over 256 bytes, expected a short one");
  const std::time_t t = std::chrono::system_clock::to_time_t(in.now());
  std::tm tm{};
  localtime_r(&t, &tm);
  std::string out(format.size() * 16 + 64, '\0');
  const size_t n = std::strftime(out.data(), out.size(), format.c_str(), &tm);
  out.resize(n);
  return Value(std::move(out));
}

Value range(Interpreter& in, const Args& args) {
  args.check("range", 3, {});
  for (const Value& v : args.positional) {
    if (!v.is_int() && !v.is_bool())
      throw Failure(fmt::format("found {} in range(), expected integers", v.type_name()));
  }
  if (args.positional.empty())
    throw Failure("found range() without arguments, expected 1 to 3 integers");
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  if (args.positional.size() == 1) {
    stop = args.positional[0].as_int();
  } else {
    start = args.positional[0].as_int();
    stop = args.positional[1].as_int();
    if (args.positional.size() == 3) step = args.positional[2].as_int();
  }
  if (step == 0) throw Failure("found range() with step 0, expected a non-zero step");
  const long double span = static_cast<long double>(stop) - static_cast<long double>(start);
  const long double count =
      std::max<long double>(0, std::ceil(span / static_cast<long double>(step)));
  in.check_list_size(count > 1e15L ? SIZE_MAX : static_cast<size_t>(count));
  in.step(static_cast<uint64_t>(count));
  List out;
  int64_t value = start;
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) {
    out.emplace_back(value);
    if (__builtin_add_overflow(value, step, &value)) break;  // only past stop
  }
  return Value(std::move(out));
}

Value dict_of(const Args& args, bool is_namespace) {
  std::vector<std::pair<std::string, Value>> entries;
  for (const Value& v : args.positional) {
    if (!v.is_dict())
      throw Failure(fmt::format("found {} in namespace()/dict(), expected a dict or name=value",
                                v.type_name()));
    for (const auto& e : v.as_dict().entries()) entries.push_back(e);
  }
  for (const auto& e : args.keyword) entries.push_back(e);
  return make_dict(std::move(entries), is_namespace);
}

Value global(std::string name, Callable::Builtin id) {
  auto fn = std::make_shared<Callable>();
  fn->name = std::move(name);
  fn->builtin = id;
  return Value(std::shared_ptr<const Callable>(std::move(fn)));
}

}  // namespace

Value call_builtin(Interpreter& in, const Callable& fn, const Args& args) {
  switch (fn.builtin) {
    case Callable::Builtin::kRaiseException:
      throw Raised(args.positional.empty() ? std::string() : to_str(args.positional[0]));
    case Callable::Builtin::kStrftimeNow:
      return strftime_now(in, args);
    case Callable::Builtin::kNamespace:
      return dict_of(args, true);
    case Callable::Builtin::kDict:
      return dict_of(args, false);
    case Callable::Builtin::kRange:
      return range(in, args);
    case Callable::Builtin::kNone:
      break;
  }
  throw Failure(fmt::format("found a call of '{}', expected a function", fn.name));
}

std::vector<std::pair<std::string, Value>> builtin_globals() {
  return {
      {"raise_exception", global("raise_exception", Callable::Builtin::kRaiseException)},
      {"strftime_now", global("strftime_now", Callable::Builtin::kStrftimeNow)},
      {"namespace", global("namespace", Callable::Builtin::kNamespace)},
      {"range", global("range", Callable::Builtin::kRange)},
      {"dict", global("dict", Callable::Builtin::kDict)},
  };
}

}  // namespace tessera::jinja
