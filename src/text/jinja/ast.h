// The parsed template: expressions and statements, each with the source
// position errors name. Built by the parser, read-only afterwards.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/lexer.h"
#include "jinja/value.h"

namespace tessera::jinja::ast {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using Body = std::vector<Stmt>;

enum class ExprKind : uint8_t {
  kLiteral,    // literal: none, bool, int, float or string
  kName,       // name
  kList,       // args: items (tuples too)
  kDict,       // args: key, value, key, value, ...
  kAttr,       // args[0].name
  kItem,       // args[0][args[1]]
  kSlice,      // args[0][args[1]:args[2]:args[3]], missing parts are null
  kCall,       // args[0](args[1..], kwargs)
  kFilter,     // args[0] | name(args[1..], kwargs)
  kTest,       // args[0] is [not] name(args[1..], kwargs)
  kUnary,      // op: "-", "+", "not"; args[0]
  kBinary,     // op: + - * / // % ** ~ == != < <= > >= in "not in"; args[0], args[1]
  kAnd,        // args[0] and args[1]
  kOr,         // args[0] or args[1]
  kCondition,  // args[0] if args[1] else args[2] (null: undefined)
};

struct Expr {
  ExprKind kind;
  Loc loc;
  std::string name;      // kName, kAttr, kFilter, kTest; the operator for kUnary and kBinary
  Value literal;         // kLiteral
  bool negated = false;  // kTest: `is not`
  uint32_t height = 1;   // nodes on the longest path down
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

enum class StmtKind : uint8_t {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches: (condition, body)...; a null condition is `else`
  kFor,          // for targets in expr [if filter]: body [else: else_body]
  kSet,          // set targets = expr; or set targets[0].attr = expr (namespace)
  kSetBlock,     // set targets[0] %} body {% endset
  kMacro,        // macro name(params) body
  kFilterBlock,  // filter: name, filter_args; body
  kBreak,
  kContinue,
  kDo,          // do expr
  kGeneration,  // generation body endgeneration (HF's marker for assistant text)
};

struct Branch {
  ExprPtr condition;  // null: else
  Body body;
};

struct Param {
  std::string name;
  ExprPtr default_value;  // null: none given
};

struct Stmt {
  StmtKind kind;
  Loc loc;
  std::string text;  // kText; kMacro: the macro's name
  ExprPtr expr;      // kOutput, kFor (iterable), kSet (value), kDo; kFilterBlock: the filter call
  ExprPtr filter;    // kFor: the `if` condition
  std::vector<std::string> targets;  // kFor, kSet, kSetBlock
  std::string attr;                  // kSet: `set ns.attr = ...`
  std::vector<Branch> branches;      // kIf
  Body body;                         // kFor, kSetBlock, kMacro, kFilterBlock, kGeneration
  Body else_body;                    // kFor
  std::vector<Param> params;         // kMacro
};

}  // namespace tessera::jinja::ast
