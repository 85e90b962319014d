#pragma once
// One flat record per row as named cells, and its three reporters (console table, CSV, JSON): the
// output of `ciuic-bench compress` and `ciuic-bench kernel`, whose columns differ by command.
#include <cmath>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ciuic::cells {

using Value = std::variant<std::string, double, int64_t, bool>;
struct Cell {
  std::string key;
  Value value;
  int width;
  int precision = 2;
};
using Row = std::vector<Cell>;

inline std::string FormatCell(const Cell& c) {
  if (auto* s = std::get_if<std::string>(&c.value)) return *s;
  if (auto* d = std::get_if<double>(&c.value)) {
    if (std::isnan(*d)) return "-";
    if (std::fabs(*d) != 0 && (std::fabs(*d) < 1e-3 || std::fabs(*d) >= 1e7)) return fmt::format("{:.{}e}", *d, 2);
    return fmt::format("{:.{}f}", *d, c.precision);
  }
  if (auto* b = std::get_if<bool>(&c.value)) return *b ? "yes" : "no";
  return std::to_string(std::get<int64_t>(c.value));
}

inline std::string TableText(const std::vector<Row>& rows) {
  std::ostringstream o;
  if (rows.empty()) return "";
  std::string head = "#";
  for (const Cell& c : rows[0]) head += fmt::format(" {:>{}}", c.key, c.width);
  o << head << "\n";
  for (const Row& r : rows) {
    std::string line = " ";
    for (const Cell& c : r) line += fmt::format(" {:>{}}", FormatCell(c), c.width);
    o << line << "\n";
  }
  return o.str();
}

inline std::string CsvText(const std::vector<Row>& rows) {
  std::ostringstream o;
  if (rows.empty()) return "";
  for (size_t i = 0; i < rows[0].size(); ++i) o << (i ? "," : "") << rows[0][i].key;
  o << "\n";
  for (const Row& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) {
      o << (i ? "," : "");
      if (auto* d = std::get_if<double>(&r[i].value)) {
        if (!std::isnan(*d)) o << fmt::format("{}", *d);
      } else {
        o << FormatCell(r[i]);
      }
    }
    o << "\n";
  }
  return o.str();
}

inline nlohmann::json JsonRows(const std::vector<Row>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows) {
    nlohmann::json j = nlohmann::json::object();
    for (const Cell& c : r) {
      std::visit(
          [&](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, double>) {
              j[c.key] = std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v);
            } else {
              j[c.key] = v;
            }
          },
          c.value);
    }
    out.push_back(j);
  }
  return out;
}

}  // namespace ciuic::cells
