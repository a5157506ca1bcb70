#include "jinja/interpreter.h"

#include <algorithm>

#include <fmt/format.h>

#include "jinja/error.h"
#include "jinja/strings.h"

namespace tessera::jinja {

using ast::Expr;
using ast::ExprKind;
using ast::Stmt;
using ast::StmtKind;

namespace {

// Interpreter recursion (expressions, statements, macro bodies) may go this
// many times max_depth deep: parse limits keep real templates far below.
constexpr size_t kDepthFactor = 32;

}  // namespace

const Value* Args::get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

void Args::check(std::string_view what, size_t max_positional,
                 std::initializer_list<std::string_view> names) const {
  if (positional.size() > max_positional) {
    throw Failure(fmt::format("found {} arguments to {}, expected at most {}", positional.size(),
                              what, max_positional));
  }
  for (const auto& [k, v] : keyword) {
    bool known = false;
    for (const std::string_view n : names) known = known || n == k;
    if (!known)
      throw Failure(fmt::format("found keyword argument '{}' to {}, expected one of its parameters",
                                k, what));
  }
}

Interpreter::Depth::Depth(Interpreter& in) : in_(in) {
  if (++in_.depth_ > kDepthFactor * in_.limits_.max_depth) {
    --in_.depth_;
    throw Failure(
        fmt::format("found evaluation nested deeper than {} levels, expected less "
                    "recursion",
                    kDepthFactor * in_.limits_.max_depth));
  }
}

Interpreter::Interpreter(const Template& tmpl, const ChatTemplateLimits& limits,
                         std::chrono::system_clock::time_point now)
    : tmpl_(tmpl), limits_(limits), now_(now) {}

std::string Interpreter::render(std::vector<std::pair<std::string, Value>> variables) {
  start_ = std::chrono::steady_clock::now();
  frames_.assign(2, Frame{});
  for (auto& [k, v] : builtin_globals()) frames_[0][k] = std::move(v);
  for (auto& [k, v] : variables) frames_[0][k] = std::move(v);
  std::string out;
  out_ = &out;
  try {
    if (exec_body(tmpl_.body) != Flow::kNormal) {
      throw Failure("found 'break' or 'continue' outside a loop, expected it inside a for loop");
    }
  } catch (const Failure& f) {
    fail_here({}, f);
  }
  return out;
}

void Interpreter::fail_here(Loc loc, const Failure& f) const {
  const std::string message = fmt::format("[{} {}:{}] {}", tmpl_.name, loc.line, loc.column,
                                          dynamic_cast<const Raised*>(&f) != nullptr
                                              ? fmt::format("raise_exception: {}", f.what())
                                              : std::string(f.what()));
  if (const auto* raised = dynamic_cast<const Raised*>(&f)) {
    throw ChatTemplateError(ErrorCategory::kInvalidArgument, message, loc.line, loc.column,
                            raised->message());
  }
  throw ChatTemplateError(ErrorCategory::kInvalidArgument, message, loc.line, loc.column);
}

void Interpreter::step(uint64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps) {
    throw Failure(
        fmt::format("found more than {} evaluation steps, expected a template that "
                    "finishes sooner",
                    limits_.max_steps));
  }
  if (limits_.max_time.count() > 0 && (steps_ & 1023) < n) {
    const auto spent = std::chrono::steady_clock::now() - start_;
    if (spent > limits_.max_time) {
      throw Failure(
          fmt::format("found a render running longer than {} ms, expected it to finish "
                      "sooner",
                      limits_.max_time.count()));
    }
  }
}

void Interpreter::check_string_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    throw Failure(fmt::format("found a string of {} bytes, expected at most {}", bytes,
                              limits_.max_output_bytes));
  }
}

void Interpreter::charge_string(size_t bytes) {
  check_string_size(bytes);
  string_bytes_ += bytes;
  const uint64_t budget = 16 * static_cast<uint64_t>(limits_.max_output_bytes);
  if (string_bytes_ > budget) {
    throw Failure(
        fmt::format("found more than {} bytes of strings built, expected a template "
                    "that builds less",
                    budget));
  }
}

void Interpreter::check_list_size(size_t items) const {
  if (items > limits_.max_list_items) {
    throw Failure(fmt::format("found a list of {} items, expected at most {}", items,
                              limits_.max_list_items));
  }
}

void Interpreter::emit(std::string_view text) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    throw Failure(
        fmt::format("found output longer than {} bytes, expected less", limits_.max_output_bytes));
  }
  out_->append(text);
}

std::string Interpreter::capture(const ast::Body& body) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    exec_body(body);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  charge_string(buffer.size());
  return buffer;
}

// ---- scopes -------------------------------------------------------------------------------

const Value* Interpreter::lookup(std::string_view name) const {
  const std::string key(name);
  for (size_t i = frames_.size(); i-- > floor_;) {
    if (const auto it = frames_[i].find(key); it != frames_[i].end()) return &it->second;
  }
  for (size_t i = std::min<size_t>(2, floor_); i-- > 0;) {
    if (const auto it = frames_[i].find(key); it != frames_[i].end()) return &it->second;
  }
  return nullptr;
}

void Interpreter::assign(const std::string& name, Value value) {
  frames_.back()[name] = std::move(value);
}

void Interpreter::bind_targets(Frame& frame, const std::vector<std::string>& targets,
                               const Value& item) {
  if (targets.size() == 1) {
    frame[targets[0]] = item;
    return;
  }
  if (!item.is_list() || item.as_list().size() != targets.size()) {
    throw Failure(fmt::format("found {} to unpack into {} names, expected a list of {} items",
                              item.is_list() ? fmt::format("{} items", item.as_list().size())
                                             : std::string(item.type_name()),
                              targets.size(), targets.size()));
  }
  for (size_t i = 0; i < targets.size(); ++i) frame[targets[i]] = item.as_list()[i];
}

// ---- statements ---------------------------------------------------------------------------

Interpreter::Flow Interpreter::exec_body(const ast::Body& body) {
  for (const Stmt& s : body) {
    const Flow flow = exec(s);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s) {
  try {
    Depth depth(*this);
    step();
    return exec_inner(s);
  } catch (const Failure& f) {
    fail_here(s.loc, f);
  }
}

Interpreter::Flow Interpreter::exec_inner(const Stmt& s) {
  switch (s.kind) {
    case StmtKind::kText:
      emit(s.text);
      return Flow::kNormal;
    case StmtKind::kOutput: {
      const Value v = eval(*s.expr);
      if (v.is_string()) {
        emit(v.as_string());
      } else {
        std::string text;
        append_str(v, text);
        emit(text);
      }
      return Flow::kNormal;
    }
    case StmtKind::kIf:
      for (const ast::Branch& b : s.branches) {
        if (!b.condition || eval(*b.condition).truthy()) return exec_body(b.body);
      }
      return Flow::kNormal;
    case StmtKind::kFor:
      return exec_for(s);
    case StmtKind::kSet:
      exec_set(s);
      return Flow::kNormal;
    case StmtKind::kSetBlock:
      assign(s.targets[0], Value(capture(s.body)));
      return Flow::kNormal;
    case StmtKind::kMacro: {
      auto fn = std::make_shared<Callable>();
      fn->name = s.text;
      fn->macro = &s;
      assign(s.text, Value(std::shared_ptr<const Callable>(std::move(fn))));
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      Value text(capture(s.body));
      // The chain's innermost filter has a null input: the body's text.
      std::vector<const Expr*> chain;
      for (const Expr* f = s.expr.get(); f != nullptr; f = f->args[0].get()) chain.push_back(f);
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        text = apply_filter(*this, (*it)->name, text, eval_args(**it, 1));
      }
      emit(to_str(text));
      return Flow::kNormal;
    }
    case StmtKind::kBreak:
    case StmtKind::kContinue:
      if (loop_depth_ == 0) {
        throw Failure("found 'break' or 'continue' outside a loop, expected it inside a for loop");
      }
      return s.kind == StmtKind::kBreak ? Flow::kBreak : Flow::kContinue;
    case StmtKind::kDo:
      eval(*s.expr);
      return Flow::kNormal;
    case StmtKind::kGeneration:
      return exec_body(s.body);
  }
  return Flow::kNormal;
}

void Interpreter::exec_set(const Stmt& s) {
  Value value = eval(*s.expr);
  if (!s.attr.empty()) {
    const Value* ns = lookup(s.targets[0]);
    if (ns == nullptr || !ns->is_dict() || !ns->as_dict().is_namespace) {
      throw Failure(fmt::format("found '{}' as {}, expected a namespace() to set '{}' on",
                                s.targets[0], ns == nullptr ? "undefined" : ns->type_name(),
                                s.attr));
    }
    ns->mutable_dict().set(s.attr, std::move(value));
    return;
  }
  bind_targets(frames_.back(), s.targets, value);
}

namespace {

// The items a for loop visits: list items, dict keys, string characters.
List iteration_items(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return {};
    case Value::Type::kList:
      return v.as_list();
    case Value::Type::kDict: {
      List keys;
      for (const auto& [k, e] : v.as_dict().entries()) keys.emplace_back(k);
      return keys;
    }
    case Value::Type::kString: {
      List chars;
      const std::string& s = v.as_string();
      const std::vector<size_t> offsets = code_point_offsets(s);
      for (size_t i = 0; i + 1 < offsets.size(); ++i) {
        chars.emplace_back(s.substr(offsets[i], offsets[i + 1] - offsets[i]));
      }
      return chars;
    }
    default:
      throw Failure(
          fmt::format("found {} to loop over, expected a list, dict or string", v.type_name()));
  }
}

}  // namespace

Interpreter::Flow Interpreter::exec_for(const Stmt& s) {
  List items = iteration_items(eval(*s.expr));
  step(items.size());
  if (s.filter) {
    List kept;
    for (const Value& item : items) {
      frames_.emplace_back();
      bind_targets(frames_.back(), s.targets, item);
      bool keep = false;
      try {
        keep = eval(*s.filter).truthy();
      } catch (...) {
        frames_.pop_back();
        throw;
      }
      frames_.pop_back();
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    if (s.else_body.empty()) return Flow::kNormal;
    frames_.emplace_back();
    const Flow flow = exec_body(s.else_body);
    frames_.pop_back();
    return flow;
  }
  const size_t n = items.size();
  const auto nn = static_cast<int64_t>(n);
  // One loop object, advanced in place each iteration (as Jinja2's LoopContext).
  enum : size_t { kIndex, kIndex0, kRevindex, kRevindex0, kFirst, kLast, kPrev, kNext };
  const Value loop = make_dict({
      {"index", Value()},
      {"index0", Value()},
      {"revindex", Value()},
      {"revindex0", Value()},
      {"first", Value()},
      {"last", Value()},
      {"previtem", Value()},
      {"nextitem", Value()},
      {"length", Value(nn)},
      {"depth", Value(1)},
      {"depth0", Value(0)},
  });
  Dict& info = loop.mutable_dict();
  ++loop_depth_;
  frames_.emplace_back();
  const auto leave = [&] {
    frames_.pop_back();
    --loop_depth_;
  };
  try {
    for (size_t i = 0; i < n; ++i) {
      if (++iterations_ > limits_.max_loop_iterations) {
        throw Failure(fmt::format("found more than {} loop iterations, expected fewer",
                                  limits_.max_loop_iterations));
      }
      const auto ni = static_cast<int64_t>(i);
      info.value_at(kIndex) = Value(ni + 1);
      info.value_at(kIndex0) = Value(ni);
      info.value_at(kRevindex) = Value(nn - ni);
      info.value_at(kRevindex0) = Value(nn - ni - 1);
      info.value_at(kFirst) = Value(i == 0);
      info.value_at(kLast) = Value(i + 1 == n);
      info.value_at(kPrev) = i > 0 ? items[i - 1] : Value();
      info.value_at(kNext) = i + 1 < n ? items[i + 1] : Value();
      Frame& frame = frames_.back();
      frame.clear();  // names set in one iteration do not reach the next
      frame["loop"] = loop;
      bind_targets(frame, s.targets, items[i]);
      if (exec_body(s.body) == Flow::kBreak) break;
    }
  } catch (...) {
    leave();
    throw;
  }
  leave();
  return Flow::kNormal;
}

// ---- expressions --------------------------------------------------------------------------

Value Interpreter::eval(const Expr& e) {
  try {
    Depth depth(*this);
    step();
    return eval_inner(e);
  } catch (const Failure& f) {
    fail_here(e.loc, f);
  }
}

Args Interpreter::eval_args(const Expr& e, size_t first) {
  Args args;
  for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
  for (const auto& [k, a] : e.kwargs) args.keyword.emplace_back(k, eval(*a));
  return args;
}

Value Interpreter::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.literal;
    case ExprKind::kName: {
      const Value* v = lookup(e.name);
      return v != nullptr ? *v : Value();
    }
    case ExprKind::kList: {
      check_list_size(e.args.size());
      List items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a));
      return Value(std::move(items));
    }
    case ExprKind::kDict: {
      std::vector<std::pair<std::string, Value>> entries;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        const Value key = eval(*e.args[i]);
        if (!key.is_string()) {
          throw Failure(fmt::format("found a {} dict key, expected a string", key.type_name()));
        }
        entries.emplace_back(key.as_string(), eval(*e.args[i + 1]));
      }
      return make_dict(std::move(entries));
    }
    case ExprKind::kAttr:
      return get_attr(eval(*e.args[0]), *e.args[0], e.name);
    case ExprKind::kItem:
      return get_item(eval(*e.args[0]), *e.args[0], eval(*e.args[1]));
    case ExprKind::kSlice:
      return slice(eval(*e.args[0]), e);
    case ExprKind::kCall:
      return eval_call(e);
    case ExprKind::kFilter:
      return apply_filter(*this, e.name, eval(*e.args[0]), eval_args(e, 1));
    case ExprKind::kTest: {
      const bool result = apply_test(*this, e.name, eval(*e.args[0]), eval_args(e, 1));
      return Value(result != e.negated);
    }
    case ExprKind::kUnary: {
      const Value v = eval(*e.args[0]);
      if (e.name == "not") return Value(!v.truthy());
      if (!v.is_number()) {
        throw Failure(
            fmt::format("found unary '{}' on {}, expected a number", e.name, v.type_name()));
      }
      if (e.name == "+") return v.is_bool() ? Value(v.as_int()) : v;
      if (v.is_float()) return Value(-v.as_float());
      if (v.as_int() == INT64_MIN)
        throw Failure("found an integer overflow, expected a smaller number");
      return Value(-v.as_int());
    }
    case ExprKind::kBinary:
      return binary_op(*this, e.name, eval(*e.args[0]), eval(*e.args[1]));
    case ExprKind::kAnd: {
      Value left = eval(*e.args[0]);
      return left.truthy() ? eval(*e.args[1]) : left;
    }
    case ExprKind::kOr: {
      Value left = eval(*e.args[0]);
      return left.truthy() ? left : eval(*e.args[1]);
    }
    case ExprKind::kCondition:
      if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
      return e.args[2] ? eval(*e.args[2]) : Value();
  }
  return Value();
}

namespace {

// The dotted path of a name expression ("message.content"), or empty.
std::string path_of(const Expr& e) {
  if (e.kind == ExprKind::kName) return e.name;
  if (e.kind == ExprKind::kAttr) {
    const std::string base = path_of(*e.args[0]);
    return base.empty() ? base : base + "." + e.name;
  }
  return {};
}

std::string describe_expr(const Expr& e) {
  const std::string path = path_of(e);
  return path.empty() ? "a value" : fmt::format("'{}'", path);
}

}  // namespace

Value Interpreter::get_attr(const Value& obj, const Expr& obj_expr, std::string_view name) {
  if (obj.is_undefined()) {
    throw Failure(fmt::format("found {} undefined, expected a value with attribute '{}'",
                              describe_expr(obj_expr), name));
  }
  if (obj.is_dict()) {
    const Value* v = obj.as_dict().find(name);
    return v != nullptr ? *v : Value();
  }
  return Value();  // strings, lists and numbers have no data attributes
}

Value Interpreter::get_item(const Value& obj, const Expr& obj_expr, const Value& key) {
  switch (obj.type()) {
    case Value::Type::kUndefined:
      throw Failure(fmt::format("found {} undefined, expected a value to index with [{}]",
                                describe_expr(obj_expr), to_str(key)));
    case Value::Type::kDict:
      if (key.is_string()) {
        const Value* v = obj.as_dict().find(key.as_string());
        return v != nullptr ? *v : Value();
      }
      return Value();
    case Value::Type::kList:
    case Value::Type::kString: {
      if (!key.is_int() && !key.is_bool()) return Value();
      if (obj.is_list()) {
        const List& items = obj.as_list();
        int64_t i = key.as_int();
        if (i < 0) i += static_cast<int64_t>(items.size());
        if (i < 0 || i >= static_cast<int64_t>(items.size())) return Value();
        return items[static_cast<size_t>(i)];
      }
      const std::string& s = obj.as_string();
      const std::vector<size_t> offsets = code_point_offsets(s);
      const auto n = static_cast<int64_t>(offsets.size() - 1);
      int64_t i = key.as_int();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value();
      const auto k = static_cast<size_t>(i);
      return Value(s.substr(offsets[k], offsets[k + 1] - offsets[k]));
    }
    default:
      return Value();
  }
}

Value Interpreter::slice(const Value& obj, const Expr& e) {
  const Value start = e.args[1] ? eval(*e.args[1]) : Value::none();
  const Value stop = e.args[2] ? eval(*e.args[2]) : Value::none();
  const Value stride = e.args[3] ? eval(*e.args[3]) : Value::none();
  if (obj.is_list()) {
    const List& items = obj.as_list();
    List out;
    for (const size_t i : slice_indices(items.size(), start, stop, stride)) out.push_back(items[i]);
    step(out.size());
    return Value(std::move(out));
  }
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    const std::vector<size_t> offsets = code_point_offsets(s);
    std::string out;
    for (const size_t i : slice_indices(offsets.size() - 1, start, stop, stride)) {
      out.append(s, offsets[i], offsets[i + 1] - offsets[i]);
    }
    step(offsets.size() / 16);
    return Value(std::move(out));
  }
  if (obj.is_undefined()) {
    throw Failure(fmt::format("found {} undefined, expected a list or string to slice",
                              describe_expr(*e.args[0])));
  }
  throw Failure(fmt::format("found {} to slice, expected a list or string", obj.type_name()));
}

Value Interpreter::eval_call(const Expr& e) {
  const Expr& callee = *e.args[0];
  if (callee.kind == ExprKind::kAttr) {
    const Value object = eval(*callee.args[0]);
    const Args args = eval_args(e, 1);
    Value result;
    if (call_method(*this, object, callee.name, args, result)) return result;
    return call(get_attr(object, *callee.args[0], callee.name), args);
  }
  const Value fn = eval(callee);
  if (fn.is_undefined()) {
    throw Failure(
        fmt::format("found {} undefined, expected a function to call", describe_expr(callee)));
  }
  return call(fn, eval_args(e, 1));
}

Value Interpreter::call(const Value& callee, const Args& args) {
  if (!callee.is_callable()) {
    throw Failure(
        fmt::format("found a call of {}, expected a function or macro", callee.type_name()));
  }
  const Callable& fn = callee.as_callable();
  if (fn.macro != nullptr) return call_macro(fn, args);
  return call_builtin(*this, fn, args);
}

Value Interpreter::call_macro(const Callable& fn, const Args& args) {
  const Stmt& m = *fn.macro;
  if (macro_depth_ >= limits_.max_depth) {
    throw Failure(
        fmt::format("found macro calls nested deeper than {} levels, expected less "
                    "recursion",
                    limits_.max_depth));
  }
  if (args.positional.size() > m.params.size()) {
    throw Failure(fmt::format("found {} arguments to macro '{}', expected at most {}",
                              args.positional.size(), m.text, m.params.size()));
  }
  Frame frame;
  for (const auto& [k, v] : args.keyword) {
    bool known = false;
    for (const ast::Param& p : m.params) known = known || p.name == k;
    if (!known) {
      throw Failure(
          fmt::format("found keyword argument '{}' to macro '{}', expected one of its "
                      "parameters",
                      k, m.text));
    }
    frame[k] = v;
  }
  const size_t saved_floor = floor_;
  const size_t saved_loops = loop_depth_;
  floor_ = frames_.size();
  frames_.push_back(std::move(frame));
  ++macro_depth_;
  loop_depth_ = 0;
  const auto restore = [&] {
    frames_.resize(floor_);
    floor_ = saved_floor;
    --macro_depth_;
    loop_depth_ = saved_loops;
  };
  std::string body;
  try {
    for (size_t i = 0; i < m.params.size(); ++i) {
      const ast::Param& p = m.params[i];
      if (i < args.positional.size()) {
        frames_.back()[p.name] = args.positional[i];
      } else if (!frames_.back().contains(p.name)) {
        frames_.back()[p.name] = p.default_value ? eval(*p.default_value) : Value();
      }
    }
    body = capture(m.body);
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return Value(std::move(body));
}

}  // namespace tessera::jinja
