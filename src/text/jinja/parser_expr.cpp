// Expressions, after jinja2/parser.py: parse_tuple > condexpr > or > and >
// not > compare > math1 (+ -) > concat (~) > math2 (* / // %) > pow (**) >
// unary (- +) > primary, postfix (. [] ()), then filters (|) and tests (is).
#include <fmt/format.h>

#include "jinja/error.h"
#include "jinja/parser_impl.h"

namespace tessera::jinja {

using ast::ExprKind;
using ast::ExprPtr;

ExprPtr Parser::parse_expression(bool with_condexpr) {
  Nest nest(*this, peek().loc);
  return with_condexpr ? parse_condexpr() : parse_or();
}

bool Parser::is_tuple_end(std::string_view extra_end) const {
  const Token& t = peek();
  if (t.kind == TokenKind::kVarEnd || t.kind == TokenKind::kBlockEnd || t.kind == TokenKind::kEnd) {
    return true;
  }
  if (t.kind == TokenKind::kOperator && (t.text == ")" || t.text == "]" || t.text == "}"))
    return true;
  return !extra_end.empty() && t.kind == TokenKind::kName && t.text == extra_end;
}

// `a, b` makes a tuple (a list here); `(a)` is just a.
ExprPtr Parser::parse_tuple(bool with_condexpr, bool explicit_parens, std::string_view extra_end) {
  const Loc loc = peek().loc;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  for (;;) {
    if (!items.empty()) {
      if (!skip_op(",")) break;
      is_tuple = true;
    }
    if (is_tuple_end(extra_end)) break;
    items.push_back(parse_expression(with_condexpr));
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) fail(peek(), "an expression");
  }
  return make(ExprKind::kList, loc, std::move(items));
}

ExprPtr Parser::parse_condexpr() {
  ExprPtr expr1 = parse_or();
  while (at_name("if")) {
    const Loc loc = next().loc;
    ExprPtr expr2 = parse_or();
    ExprPtr expr3 = skip_name("else") ? parse_condexpr() : nullptr;
    std::vector<ExprPtr> args;
    args.push_back(std::move(expr1));
    args.push_back(std::move(expr2));
    args.push_back(std::move(expr3));
    expr1 = make(ExprKind::kCondition, loc, std::move(args));
  }
  return expr1;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (at_name("or")) {
    const Loc loc = next().loc;
    std::vector<ExprPtr> args;
    args.push_back(std::move(left));
    args.push_back(parse_and());
    left = make(ExprKind::kOr, loc, std::move(args));
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (at_name("and")) {
    const Loc loc = next().loc;
    std::vector<ExprPtr> args;
    args.push_back(std::move(left));
    args.push_back(parse_not());
    left = make(ExprKind::kAnd, loc, std::move(args));
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (at_name("not")) {
    const Loc loc = next().loc;
    Nest nest(*this, loc);
    std::vector<ExprPtr> args;
    args.push_back(parse_not());
    return make(ExprKind::kUnary, loc, std::move(args), "not");
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  ExprPtr left = parse_math1();
  for (;;) {
    const Token& t = peek();
    std::string op;
    if (t.kind == TokenKind::kOperator && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                           t.text == "<=" || t.text == ">" || t.text == ">=")) {
      op = t.text;
      next();
    } else if (at_name("in")) {
      op = "in";
      next();
    } else if (at_name("not") && peek(1).kind == TokenKind::kName && peek(1).text == "in") {
      op = "not in";
      next();
      next();
    } else {
      return left;
    }
    std::vector<ExprPtr> args;
    args.push_back(std::move(left));
    args.push_back(parse_math1());
    left = make(ExprKind::kBinary, t.loc, std::move(args), op);
  }
}

namespace {

bool at_any(const Token& t, std::initializer_list<std::string_view> ops) {
  if (t.kind != TokenKind::kOperator) return false;
  for (const std::string_view op : ops) {
    if (t.text == op) return true;
  }
  return false;
}

}  // namespace

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (at_any(peek(), {"+", "-"})) {
    const Token& t = next();
    std::vector<ExprPtr> args;
    args.push_back(std::move(left));
    args.push_back(parse_concat());
    left = make(ExprKind::kBinary, t.loc, std::move(args), t.text);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr left = parse_math2();
  while (at_op("~")) {
    const Token& t = next();
    std::vector<ExprPtr> args;
    args.push_back(std::move(left));
    args.push_back(parse_math2());
    left = make(ExprKind::kBinary, t.loc, std::move(args), "~");
  }
  return left;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (at_any(peek(), {"*", "/", "//", "%"})) {
    const Token& t = next();
    std::vector<ExprPtr> args;
    args.push_back(std::move(left));
    args.push_back(parse_pow());
    left = make(ExprKind::kBinary, t.loc, std::move(args), t.text);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary();
  while (at_op("**")) {
    const Token& t = next();
    std::vector<ExprPtr> args;
    args.push_back(std::move(left));
    args.push_back(parse_unary());
    left = make(ExprKind::kBinary, t.loc, std::move(args), "**");
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  ExprPtr node;
  if (at_op("-") || at_op("+")) {
    const Token& t = next();
    Nest nest(*this, t.loc);
    std::vector<ExprPtr> args;
    args.push_back(parse_unary(false));
    node = make(ExprKind::kUnary, t.loc, std::move(args), t.text);
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& t = peek();
  const Loc loc = t.loc;
  switch (t.kind) {
    case TokenKind::kName: {
      next();
      ExprPtr e = make(ExprKind::kLiteral, loc, {});
      if (t.text == "true" || t.text == "True") {
        e->literal = Value(true);
      } else if (t.text == "false" || t.text == "False") {
        e->literal = Value(false);
      } else if (t.text == "none" || t.text == "None") {
        e->literal = Value::none();
      } else {
        e->kind = ExprKind::kName;
        e->name = t.text;
      }
      return e;
    }
    case TokenKind::kString: {
      std::string s = next().text;
      while (peek().kind == TokenKind::kString) s += next().text;  // "a" "b"
      ExprPtr e = make(ExprKind::kLiteral, loc, {});
      e->literal = Value(std::move(s));
      return e;
    }
    case TokenKind::kInteger:
    case TokenKind::kFloat: {
      next();
      ExprPtr e = make(ExprKind::kLiteral, loc, {});
      e->literal = t.kind == TokenKind::kInteger ? Value(t.integer) : Value(t.number);
      return e;
    }
    case TokenKind::kOperator:
      if (t.text == "(") {
        next();
        Nest nest(*this, loc);
        ExprPtr e = parse_tuple(true, true);
        expect_op(")");
        return e;
      }
      if (t.text == "[") {
        next();
        Nest nest(*this, loc);
        std::vector<ExprPtr> items;
        while (!at_op("]")) {
          items.push_back(parse_expression());
          if (!skip_op(",")) break;
        }
        expect_op("]");
        return make(ExprKind::kList, loc, std::move(items));
      }
      if (t.text == "{") {
        next();
        Nest nest(*this, loc);
        std::vector<ExprPtr> items;
        while (!at_op("}")) {
          items.push_back(parse_expression());
          expect_op(":");
          items.push_back(parse_expression());
          if (!skip_op(",")) break;
        }
        expect_op("}");
        return make(ExprKind::kDict, loc, std::move(items));
      }
      break;
    default:
      break;
  }
  fail(t, "an expression (a name, literal, '(', '[' or '{')");
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  for (;;) {
    if (at_op(".")) {
      const Loc loc = next().loc;
      const Token& t = peek();
      if (t.kind == TokenKind::kName) {
        next();
        std::vector<ExprPtr> args;
        args.push_back(std::move(node));
        node = make(ExprKind::kAttr, loc, std::move(args), t.text);
      } else if (t.kind == TokenKind::kInteger) {
        next();
        ExprPtr index = make(ExprKind::kLiteral, t.loc, {});
        index->literal = Value(t.integer);
        std::vector<ExprPtr> args;
        args.push_back(std::move(node));
        args.push_back(std::move(index));
        node = make(ExprKind::kItem, loc, std::move(args));
      } else {
        fail(t, "an attribute name after '.'");
      }
    } else if (at_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (at_op("(")) {
      const Loc loc = peek().loc;
      CallArgs call = parse_call_args();
      call.args.insert(call.args.begin(), std::move(node));
      node = make(ExprKind::kCall, loc, std::move(call.args), {}, std::move(call.kwargs));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Loc loc = next().loc;  // '['
  Nest nest(*this, loc);
  std::vector<ExprPtr> args;
  args.push_back(std::move(node));
  // [a], [a:b], [a:b:c], with any part left out.
  std::vector<ExprPtr> parts;
  bool is_slice = false;
  for (int i = 0; i < 3; ++i) {
    if (at_op(":") || at_op("]")) {
      parts.push_back(nullptr);
    } else {
      parts.push_back(parse_expression());
    }
    if (i < 2 && skip_op(":")) {
      is_slice = true;
      continue;
    }
    break;
  }
  expect_op("]");
  if (!is_slice) {
    if (!parts[0]) fail(peek(), "an index inside '[]'");
    args.push_back(std::move(parts[0]));
    return make(ExprKind::kItem, loc, std::move(args));
  }
  parts.resize(3);
  for (auto& p : parts) args.push_back(std::move(p));
  return make(ExprKind::kSlice, loc, std::move(args));
}

Parser::CallArgs Parser::parse_call_args() {
  const Loc loc = expect_op("(").loc;
  Nest nest(*this, loc);
  CallArgs call;
  while (!at_op(")")) {
    if (at_op("*") || at_op("**"))
      fail(peek(), "an argument (*args and **kwargs are not supported)");
    if (peek().kind == TokenKind::kName && peek(1).kind == TokenKind::kOperator &&
        peek(1).text == "=") {
      std::string key = next().text;
      next();
      call.kwargs.emplace_back(std::move(key), parse_expression());
    } else {
      if (!call.kwargs.empty())
        fail(peek(), "a keyword argument (name=value) after keyword arguments");
      call.args.push_back(parse_expression());
    }
    if (!skip_op(",")) break;
  }
  expect_op(")");
  return call;
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  for (;;) {
    if (at_op("|")) {
      node = parse_filter(std::move(node), false);
    } else if (at_name("is")) {
      node = parse_test(std::move(node));
    } else if (at_op("(")) {
      const Loc loc = peek().loc;
      CallArgs call = parse_call_args();
      call.args.insert(call.args.begin(), std::move(node));
      node = make(ExprKind::kCall, loc, std::move(call.args), {}, std::move(call.kwargs));
    } else {
      return node;
    }
  }
}

// `| name`, `| name(args)`, dotted names (`| a.b`) joined with dots.
ExprPtr Parser::parse_filter(ExprPtr node, bool start_inline) {
  if (!start_inline) expect_op("|");
  const Token& t = expect_name();
  const Loc loc = t.loc;
  std::string name = t.text;
  while (at_op(".")) {
    next();
    name += "." + expect_name().text;
  }
  CallArgs call;
  if (at_op("(")) call = parse_call_args();
  call.args.insert(call.args.begin(), std::move(node));
  return make(ExprKind::kFilter, loc, std::move(call.args), std::move(name),
              std::move(call.kwargs));
}

ExprPtr Parser::parse_test(ExprPtr node) {
  const Loc loc = next().loc;  // 'is'
  const bool negated = skip_name("not");
  const Token& t = expect_name();
  std::string name = t.text;
  while (at_op(".")) {
    next();
    name += "." + expect_name().text;
  }
  CallArgs call;
  const Token& after = peek();
  if (at_op("(")) {
    call = parse_call_args();
  } else if ((after.kind == TokenKind::kName || after.kind == TokenKind::kString ||
              after.kind == TokenKind::kInteger || after.kind == TokenKind::kFloat || at_op("[") ||
              at_op("{")) &&
             !at_name("else") && !at_name("or") && !at_name("and")) {
    if (at_name("is")) fail(after, "one test after 'is' (tests cannot be chained)");
    call.args.push_back(parse_postfix(parse_primary()));  // `x is divisibleby 3`
  }
  call.args.insert(call.args.begin(), std::move(node));
  ExprPtr e =
      make(ExprKind::kTest, loc, std::move(call.args), std::move(name), std::move(call.kwargs));
  e->negated = negated;
  return e;
}

}  // namespace tessera::jinja
