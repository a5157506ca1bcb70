#include "jinja/parser.h"

#include <fmt/format.h>

#include "jinja/error.h"
#include "jinja/parser_impl.h"

namespace tessera::jinja {

using ast::Body;
using ast::Stmt;
using ast::StmtKind;

Parser::Nest::Nest(Parser& p, Loc loc) : p_(p) {
  if (++p_.depth_ > p_.max_depth_) {
    --p_.depth_;
    fail_parse(p_.name_, loc,
               fmt::format("found blocks or brackets nested deeper than {} levels, expected less "
                           "nesting",
                           p_.max_depth_));
  }
}

const Token& Parser::peek(size_t ahead) const {
  return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
}

const Token& Parser::next() {
  const Token& t = tokens_[pos_];
  if (pos_ + 1 < tokens_.size()) ++pos_;
  return t;
}

bool Parser::at_op(std::string_view op) const {
  return peek().kind == TokenKind::kOperator && peek().text == op;
}

bool Parser::at_name(std::string_view name) const {
  return peek().kind == TokenKind::kName && peek().text == name;
}

bool Parser::skip_op(std::string_view op) {
  if (!at_op(op)) return false;
  next();
  return true;
}

bool Parser::skip_name(std::string_view name) {
  if (!at_name(name)) return false;
  next();
  return true;
}

const Token& Parser::expect_op(std::string_view op) {
  if (!at_op(op)) fail(peek(), fmt::format("'{}'", op));
  return next();
}

const Token& Parser::expect_name() {
  if (peek().kind != TokenKind::kName) fail(peek(), "a name");
  return next();
}

void Parser::expect_name(std::string_view name) {
  if (!at_name(name)) fail(peek(), fmt::format("'{}'", name));
  next();
}

void Parser::expect_block_end() {
  if (peek().kind != TokenKind::kBlockEnd) fail(peek(), "'%}'");
  next();
}

void Parser::fail(const Token& at, std::string_view expected) const {
  fail_parse(name_, at.loc, fmt::format("found {}, expected {}", describe(at), expected));
}

ast::ExprPtr Parser::make(ast::ExprKind kind, Loc loc, std::vector<ast::ExprPtr> args,
                          std::string name,
                          std::vector<std::pair<std::string, ast::ExprPtr>> kwargs) {
  auto e = std::make_unique<ast::Expr>();
  e->kind = kind;
  e->loc = loc;
  e->name = std::move(name);
  uint32_t below = 0;
  for (const auto& a : args) {
    if (a) below = std::max(below, a->height);
  }
  for (const auto& [k, a] : kwargs) below = std::max(below, a->height);
  e->height = below + 1;
  e->args = std::move(args);
  e->kwargs = std::move(kwargs);
  if (e->height > 4 * max_depth_) {
    fail_parse(name_, loc,
               fmt::format("found an expression nested deeper than {} levels, expected a simpler "
                           "expression",
                           4 * max_depth_));
  }
  return e;
}

Body Parser::parse_all() {
  std::string end;
  return parse_body({}, end, {}, {});
}

// Statements until a tag named in `ends` (its name consumed, the rest of the
// tag not), or the end of the template when `ends` is empty.
Body Parser::parse_body(std::initializer_list<std::string_view> ends, std::string& end,
                        std::string_view opened_by, Loc opened_at) {
  Body body;
  for (;;) {
    const Token& t = peek();
    switch (t.kind) {
      case TokenKind::kText: {
        Stmt s{StmtKind::kText, t.loc};
        s.text = t.text;
        body.push_back(std::move(s));
        next();
        break;
      }
      case TokenKind::kVarBegin: {
        next();
        Stmt s{StmtKind::kOutput, t.loc};
        s.expr = parse_tuple();
        if (peek().kind != TokenKind::kVarEnd) fail(peek(), "'}}'");
        next();
        body.push_back(std::move(s));
        break;
      }
      case TokenKind::kBlockBegin: {
        const Loc tag_loc = t.loc;
        next();
        if (peek().kind == TokenKind::kName) {
          for (const std::string_view e : ends) {
            if (peek().text == e) {
              end = next().text;
              return body;
            }
          }
        }
        parse_statement(body, tag_loc);
        break;
      }
      case TokenKind::kEnd: {
        if (ends.size() == 0) return body;
        std::string names;
        for (const std::string_view e : ends) {
          names += names.empty() ? "" : " or ";
          names += fmt::format("'{}'", e);
        }
        fail_parse(name_, t.loc,
                   fmt::format("found the end of the template, expected {} to close the '{}' "
                               "block opened at {}:{}",
                               names, opened_by, opened_at.line, opened_at.column));
      }
      default:
        fail(t, "text, '{{' or '{%'");
    }
  }
}

void Parser::parse_statement(Body& body, Loc tag_loc) {
  const Token& t = peek();
  if (t.kind != TokenKind::kName) fail(t, "a statement name");
  const Loc loc = t.loc;
  const std::string keyword = t.text;
  Nest nest(*this, loc);
  if (keyword == "if") {
    next();
    body.push_back(parse_if(loc));
  } else if (keyword == "for") {
    next();
    body.push_back(parse_for(loc));
  } else if (keyword == "set") {
    next();
    body.push_back(parse_set(loc));
  } else if (keyword == "macro") {
    next();
    body.push_back(parse_macro(loc));
  } else if (keyword == "filter") {
    next();
    body.push_back(parse_filter_block(loc));
  } else if (keyword == "break" || keyword == "continue") {
    next();
    expect_block_end();
    body.push_back(Stmt{keyword == "break" ? StmtKind::kBreak : StmtKind::kContinue, loc});
  } else if (keyword == "do") {
    next();
    Stmt s{StmtKind::kDo, loc};
    s.expr = parse_tuple();
    expect_block_end();
    body.push_back(std::move(s));
  } else if (keyword == "generation") {
    next();
    expect_block_end();
    Stmt s{StmtKind::kGeneration, loc};
    std::string end;
    s.body = parse_body({"endgeneration"}, end, "generation", tag_loc);
    expect_block_end();
    body.push_back(std::move(s));
  } else if (keyword == "include" || keyword == "import" || keyword == "from" ||
             keyword == "extends" || keyword == "block" || keyword == "call") {
    fail_parse(name_, loc,
               fmt::format("found '{}', expected a statement a chat template may use (templates "
                           "cannot load other templates; call blocks are not supported)",
                           keyword));
  } else {
    fail(t,
         "one of if, for, set, macro, filter, break, continue, do, generation, raw, or the end "
         "of an open block");
  }
}

Stmt Parser::parse_if(Loc loc) {
  Stmt s{StmtKind::kIf, loc};
  ast::ExprPtr condition = parse_tuple(false);
  for (;;) {
    expect_block_end();
    std::string end;
    Body body = parse_body({"elif", "else", "endif"}, end, "if", loc);
    s.branches.push_back({std::move(condition), std::move(body)});
    if (end == "elif") {
      condition = parse_tuple(false);
      continue;
    }
    if (end == "else") {
      expect_block_end();
      Body else_body = parse_body({"endif"}, end, "if", loc);
      s.branches.push_back({nullptr, std::move(else_body)});
    }
    expect_block_end();
    return s;
  }
}

std::vector<std::string> Parser::parse_targets(bool allow_attr, std::string* attr) {
  std::vector<std::string> names;
  const bool parens = skip_op("(");
  for (;;) {
    names.push_back(expect_name().text);
    if (allow_attr && names.size() == 1 && !parens && at_op(".")) {
      next();
      *attr = expect_name().text;
      return names;
    }
    if (!skip_op(",")) break;
    if (parens && at_op(")")) break;
  }
  if (parens) expect_op(")");
  return names;
}

Stmt Parser::parse_for(Loc loc) {
  Stmt s{StmtKind::kFor, loc};
  s.targets = parse_targets(false, nullptr);
  expect_name("in");
  s.expr = parse_tuple(false, false, "recursive");
  if (skip_name("if")) s.filter = parse_expression();
  if (at_name("recursive")) {
    fail_parse(name_, peek().loc,
               "found 'recursive', expected '%}' (recursive loops are not supported)");
  }
  expect_block_end();
  std::string end;
  s.body = parse_body({"else", "endfor"}, end, "for", loc);
  if (end == "else") {
    expect_block_end();
    s.else_body = parse_body({"endfor"}, end, "for", loc);
  }
  expect_block_end();
  return s;
}

Stmt Parser::parse_set(Loc loc) {
  Stmt s{StmtKind::kSet, loc};
  s.targets = parse_targets(true, &s.attr);
  if (skip_op("=")) {
    s.expr = parse_tuple();
    expect_block_end();
    return s;
  }
  if (s.targets.size() != 1 || !s.attr.empty()) fail(peek(), "'='");
  expect_block_end();
  s.kind = StmtKind::kSetBlock;
  std::string end;
  s.body = parse_body({"endset"}, end, "set", loc);
  expect_block_end();
  return s;
}

Stmt Parser::parse_macro(Loc loc) {
  Stmt s{StmtKind::kMacro, loc};
  s.text = expect_name().text;
  expect_op("(");
  while (!at_op(")")) {
    ast::Param p{expect_name().text, nullptr};
    if (skip_op("=")) p.default_value = parse_expression();
    s.params.push_back(std::move(p));
    if (!skip_op(",")) break;
  }
  expect_op(")");
  expect_block_end();
  std::string end;
  s.body = parse_body({"endmacro"}, end, "macro", loc);
  if (peek().kind == TokenKind::kName && peek().text == s.text) next();  // {% endmacro name %}
  expect_block_end();
  return s;
}

Stmt Parser::parse_filter_block(Loc loc) {
  Stmt s{StmtKind::kFilterBlock, loc};
  // The filters apply to the body's text, which stands in for a null input.
  s.expr = parse_filter(nullptr, true);
  while (at_op("|")) s.expr = parse_filter(std::move(s.expr), false);
  expect_block_end();
  std::string end;
  s.body = parse_body({"endfilter"}, end, "filter", loc);
  expect_block_end();
  return s;
}

Template parse_template(std::string_view source, std::string name, size_t max_depth) {
  Template t;
  t.name = std::move(name);
  Parser parser(tokenize(source, t.name), t.name, max_depth);
  t.body = parser.parse_all();
  return t;
}

}  // namespace tessera::jinja
