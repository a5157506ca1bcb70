// Renders a parsed Template: scopes, loops, macros, output, and the limits
// of ChatTemplateLimits, counted as it goes. One Interpreter per render.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jinja/ast.h"
#include "jinja/parser.h"
#include "jinja/value.h"
#include "tessera/text/chat_template.h"

namespace tessera::jinja {

// Arguments of a call, filter or test (the input excluded).
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // Argument `index` or keyword `name`; null when neither was given.
  const Value* get(size_t index, std::string_view name) const;
  // Fails when more than `max_positional` positional arguments or a keyword
  // not in `names` was given; `what` names the callee in the message.
  void check(std::string_view what, size_t max_positional,
             std::initializer_list<std::string_view> names) const;
};

// raise_exception(msg): the template refused the conversation.
class Raised : public Failure {
 public:
  explicit Raised(std::string message) : Failure(message), message_(std::move(message)) {}
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

class Interpreter {
 public:
  Interpreter(const Template& tmpl, const ChatTemplateLimits& limits,
              std::chrono::system_clock::time_point now);

  // Renders with these variables (besides the built-in globals).
  std::string render(std::vector<std::pair<std::string, Value>> variables);

  // For the built-ins: one unit of work each; fails past the limits.
  void step(uint64_t n = 1);
  // Fails when a string or list would be larger than the limits allow.
  void check_string_size(size_t bytes) const;
  // check_string_size, and counts the bytes against the render's budget for
  // built strings (16 times max_output_bytes): call it once per string built.
  void charge_string(size_t bytes);
  void check_list_size(size_t items) const;
  std::chrono::system_clock::time_point now() const { return now_; }
  // Calls a macro or built-in function.
  Value call(const Value& callee, const Args& args);
  // Applies the named test (for select, reject, selectattr, rejectattr).
  bool test(std::string_view name, const Value& input, const Args& args);
  Value filter(std::string_view name, const Value& input, const Args& args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Frame = std::unordered_map<std::string, Value>;

  // Counts one level of interpreter recursion.
  class Depth {
   public:
    explicit Depth(Interpreter& in);
    ~Depth() { --in_.depth_; }
    Depth(const Depth&) = delete;
    Depth& operator=(const Depth&) = delete;

   private:
    Interpreter& in_;
  };

  Flow exec_body(const ast::Body& body);
  Flow exec(const ast::Stmt& s);
  Flow exec_inner(const ast::Stmt& s);
  Flow exec_for(const ast::Stmt& s);
  void exec_set(const ast::Stmt& s);
  std::string capture(const ast::Body& body);
  void emit(std::string_view text);

  Value eval(const ast::Expr& e);
  Value eval_inner(const ast::Expr& e);
  Value eval_binary(const ast::Expr& e);
  Value eval_call(const ast::Expr& e);
  Args eval_args(const ast::Expr& e, size_t first);
  Value get_attr(const Value& obj, const ast::Expr& obj_expr, std::string_view name);
  Value get_item(const Value& obj, const ast::Expr& obj_expr, const Value& key);
  Value slice(const Value& obj, const ast::Expr& e);
  Value call_macro(const Callable& macro, const Args& args);

  const Value* lookup(std::string_view name) const;
  void assign(const std::string& name, Value value);
  void bind_targets(Frame& frame, const std::vector<std::string>& targets, const Value& item);

  [[noreturn]] void fail_here(Loc loc, const Failure& f) const;

  const Template& tmpl_;
  ChatTemplateLimits limits_;
  std::chrono::system_clock::time_point now_;
  std::chrono::steady_clock::time_point start_;
  std::vector<Frame> frames_;  // [0] globals and inputs, [1] the template's own
  size_t floor_ = 2;           // a macro sees frames [floor_, end) and [0, 2)
  std::string* out_ = nullptr;
  uint64_t steps_ = 0;
  uint64_t iterations_ = 0;
  uint64_t string_bytes_ = 0;
  size_t depth_ = 0;
  size_t macro_depth_ = 0;
  size_t loop_depth_ = 0;
};

// Filters (filters.cpp), tests (is_tests.cpp), methods (methods.cpp) and global
// functions (globals.cpp).
Value apply_filter(Interpreter& in, std::string_view name, const Value& input, const Args& args);
bool apply_test(Interpreter& in, std::string_view name, const Value& input, const Args& args);
bool has_filter(std::string_view name);
// True, with `result` set, when `object`'s type has a method `name`.
bool call_method(Interpreter& in, const Value& object, std::string_view name, const Args& args,
                 Value& result);
Value call_builtin(Interpreter& in, const Callable& fn, const Args& args);
// The built-in global functions, as they are put in scope.
std::vector<std::pair<std::string, Value>> builtin_globals();

// + - * / // % ** ~ == != < <= > >= in, "not in" on two values (operators.cpp).
Value binary_op(Interpreter& in, std::string_view op, const Value& a, const Value& b);
// `item in container`.
bool contains(const Value& container, const Value& item);

// Python's slicing of a sequence of `size` items: the indices it selects.
std::vector<size_t> slice_indices(size_t size, const Value& start, const Value& stop,
                                  const Value& step);

}  // namespace tessera::jinja
