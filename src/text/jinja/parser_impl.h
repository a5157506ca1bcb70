// The parser's state, shared by the statement (parser.cpp) and expression
// (parser_expr.cpp) halves.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace tessera::jinja {

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string_view name, size_t max_depth)
      : tokens_(std::move(tokens)), name_(name), max_depth_(max_depth) {}

  ast::Body parse_all();

 private:
  // Counts one level of nesting for as long as it lives.
  class Nest {
   public:
    Nest(Parser& p, Loc loc);
    ~Nest() { --p_.depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser& p_;
  };

  // Tokens.
  const Token& peek(size_t ahead = 0) const;
  const Token& next();
  bool at_op(std::string_view op) const;
  bool at_name(std::string_view name) const;
  bool skip_op(std::string_view op);
  bool skip_name(std::string_view name);
  const Token& expect_op(std::string_view op);
  const Token& expect_name();
  void expect_name(std::string_view name);
  void expect_block_end();
  [[noreturn]] void fail(const Token& at, std::string_view expected) const;

  // Statements (parser.cpp).
  ast::Body parse_body(std::initializer_list<std::string_view> ends, std::string& end,
                       std::string_view opened_by, Loc opened_at);
  void parse_statement(ast::Body& body, Loc tag_loc);
  ast::Stmt parse_if(Loc loc);
  ast::Stmt parse_for(Loc loc);
  ast::Stmt parse_set(Loc loc);
  ast::Stmt parse_macro(Loc loc);
  ast::Stmt parse_filter_block(Loc loc);
  std::vector<std::string> parse_targets(bool allow_attr, std::string* attr);

  // Expressions (parser_expr.cpp).
 public:
  ast::ExprPtr parse_expression(bool with_condexpr = true);
  ast::ExprPtr parse_tuple(bool with_condexpr = true, bool explicit_parens = false,
                           std::string_view extra_end = {});

 private:
  ast::ExprPtr parse_condexpr();
  ast::ExprPtr parse_or();
  ast::ExprPtr parse_and();
  ast::ExprPtr parse_not();
  ast::ExprPtr parse_compare();
  ast::ExprPtr parse_math1();
  ast::ExprPtr parse_concat();
  ast::ExprPtr parse_math2();
  ast::ExprPtr parse_pow();
  ast::ExprPtr parse_unary(bool with_filter = true);
  ast::ExprPtr parse_primary();
  ast::ExprPtr parse_postfix(ast::ExprPtr node);
  ast::ExprPtr parse_filter_expr(ast::ExprPtr node);
  ast::ExprPtr parse_subscript(ast::ExprPtr node);
  ast::ExprPtr parse_filter(ast::ExprPtr node, bool start_inline);
  ast::ExprPtr parse_test(ast::ExprPtr node);
  struct CallArgs {
    std::vector<ast::ExprPtr> args;
    std::vector<std::pair<std::string, ast::ExprPtr>> kwargs;
  };
  CallArgs parse_call_args();
  bool is_tuple_end(std::string_view extra_end) const;

  // Every node is made here, which keeps trees at most 4 * max_depth high
  // (evaluating and freeing them recurses over their height).
  ast::ExprPtr make(ast::ExprKind kind, Loc loc, std::vector<ast::ExprPtr> args,
                    std::string name = {},
                    std::vector<std::pair<std::string, ast::ExprPtr>> kwargs = {});

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  std::string_view name_;
  size_t max_depth_;
  size_t depth_ = 0;
};

}  // namespace tessera::jinja
