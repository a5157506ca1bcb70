// Small helpers shared by the filters, tests and global functions.
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

#include "jinja/interpreter.h"

namespace tessera::jinja {

inline const Value& required(const Args& args, size_t i, std::string_view name,
                             std::string_view what) {
  const Value* v = args.get(i, name);
  if (v == nullptr)
    throw Failure(fmt::format("found no argument '{}' to {}, expected one", name, what));
  return *v;
}

inline bool flag(const Args& args, size_t i, std::string_view name) {
  const Value* v = args.get(i, name);
  return v != nullptr && v->truthy();
}

inline const std::string& need_string(const Value& v, std::string_view what) {
  if (!v.is_string())
    throw Failure(fmt::format("found {} for {}, expected a string", v.type_name(), what));
  return v.as_string();
}

}  // namespace tessera::jinja
