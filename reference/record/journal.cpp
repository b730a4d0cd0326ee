// The journal's records: a 4-byte length, a 4-byte FNV-1a checksum and the payload, all in host
// byte order (a journal is read back on the machine that wrote it). Payloads start with a kind:
// 'A' an attribute, 'R' rows of a table being built, 'M' rows of several tables that stand or
// fall together (with the carried rows each part took back), 'T' a whole table, 'C' the rows
// carried from a resumed file ('K', one of them taken, is read from older journals).
#include "reference/record/journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string_view>
#include <type_traits>

#include "reference/core/error.hpp"

namespace parity::record {

namespace {

constexpr char kMagic[8] = {'p', 'a', 'r', 'i', 't', 'y', 'J', '1'};

std::uint32_t checksum(const char* data, std::size_t n) {
  std::uint32_t h = 2166136261u;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(data[i])) * 16777619u;
  return h;
}

// ---- encoding ----------------------------------------------------------------------------------

class Writer {
 public:
  template <typename T>
  void number(T value) {
    static_assert(std::is_arithmetic_v<T>);
    out_.append(reinterpret_cast<const char*>(&value), sizeof value);
  }
  void text(const std::string& s) {
    number<std::uint64_t>(s.size());
    out_ += s;
  }
  template <typename T>
  void list(const std::vector<T>& values) {
    number<std::uint64_t>(values.size());
    for (const auto& v : values) {
      if constexpr (std::is_same_v<T, std::string>) text(v);
      else number(v);
    }
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& payload) : data_(payload) {}
  template <typename T>
  T number() {
    T value;
    need(sizeof value);
    std::memcpy(&value, data_.data() + at_, sizeof value);
    at_ += sizeof value;
    return value;
  }
  std::string text() {
    const auto n = number<std::uint64_t>();
    need(n);
    std::string s = data_.substr(at_, n);
    at_ += n;
    return s;
  }
  template <typename T>
  std::vector<T> list() {
    const auto n = number<std::uint64_t>();
    need(n);  // every element takes at least a byte: a damaged length fails here, not in reserve
    std::vector<T> values;
    values.reserve(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, std::string>) values.push_back(text());
      else values.push_back(number<T>());
    }
    return values;
  }
  bool at_end() const { return at_ == data_.size(); }

 private:
  void need(std::uint64_t n) const {
    if (n > data_.size() - at_) throw Error("a journal record ends early");
  }
  const std::string& data_;
  std::size_t at_ = 0;
};

void encode_attribute(Writer& w, const Attribute& value) {
  w.number<std::uint8_t>(static_cast<std::uint8_t>(value.index()));
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) w.text(v);
        else if constexpr (std::is_arithmetic_v<T>) w.number(v);
        else w.list(v);
      },
      value);
}

Attribute decode_attribute(Reader& r) {
  switch (r.number<std::uint8_t>()) {
    case 0: return r.text();
    case 1: return r.number<double>();
    case 2: return r.number<std::int64_t>();
    case 3: return r.list<std::string>();
    case 4: return r.list<double>();
    case 5: return r.list<std::int64_t>();
    default: throw Error("a journal record has an unknown attribute type");
  }
}

// Rows [first, last) of a table with its description and column names, units and types.
void encode_rows(Writer& w, const Table& table, std::size_t first, std::size_t last) {
  w.text(table.description());
  w.number<std::uint64_t>(table.columns().size());
  for (const auto& column : table.columns()) {
    w.text(column.name);
    w.text(column.unit);
    w.number<std::uint8_t>(static_cast<std::uint8_t>(column.values.index()));
    std::visit(
        [&](const auto& values) {
          using V = typename std::decay_t<decltype(values)>::value_type;
          w.list(std::vector<V>(values.begin() + static_cast<std::ptrdiff_t>(first),
                                values.begin() + static_cast<std::ptrdiff_t>(last)));
        },
        column.values);
  }
}

Table decode_rows(Reader& r) {
  Table table(r.text());
  const auto columns = r.number<std::uint64_t>();
  for (std::uint64_t c = 0; c < columns; ++c) {
    const std::string name = r.text(), unit = r.text();
    switch (r.number<std::uint8_t>()) {
      case 0: table.f64(name, unit) = r.list<double>(); break;
      case 1: table.i64(name, unit) = r.list<std::int64_t>(); break;
      case 2: table.str(name) = r.list<std::string>(); break;
      default: throw Error("a journal record has an unknown column type");
    }
  }
  table.rows();  // throws for columns of different lengths
  return table;
}

// Rows may be appended only to a table of the same columns, in the same order and types.
bool same_columns(const Table& a, const Table& b) {
  if (a.columns().size() != b.columns().size()) return false;
  for (std::size_t i = 0; i < a.columns().size(); ++i)
    if (a.columns()[i].name != b.columns()[i].name || a.columns()[i].values.index() != b.columns()[i].values.index())
      return false;
  return true;
}

}  // namespace

// ---- Contents ----------------------------------------------------------------------------------

Contents::Group& Contents::group(const std::string& path) {
  for (auto& g : groups)
    if (g.path == path) return g;
  groups.push_back(Group{path, {}, std::nullopt, false});
  return groups.back();
}

const Contents::Group* Contents::find(const std::string& path) const {
  for (const auto& g : groups)
    if (g.path == path) return &g;
  return nullptr;
}

void Contents::set_attribute(const std::string& group_path, const std::string& name, const Attribute& value) {
  auto& attributes = group(group_path).attributes;
  for (auto& [n, v] : attributes)
    if (n == name) {
      v = value;
      return;
    }
  attributes.emplace_back(name, value);
}

const Attribute* Contents::attribute(const std::string& group_path, const std::string& name) const {
  if (const Group* g = find(group_path))
    for (const auto& [n, v] : g->attributes)
      if (n == name) return &v;
  return nullptr;
}

std::size_t Contents::tables() const {
  std::size_t n = 0;
  for (const auto& g : groups) n += g.table ? 1 : 0;
  return n;
}

std::size_t Contents::rows() const {
  std::size_t n = 0;
  for (const auto& g : groups) n += g.table ? g.table->rows() : 0;
  return n;
}

// ---- Journal -----------------------------------------------------------------------------------

Journal::Journal(std::filesystem::path path) : path_(std::move(path)) {
  fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw UsageError("cannot create " + path_.string() + ": " + std::strerror(errno));
  if (write(fd_, kMagic, sizeof kMagic) != static_cast<ssize_t>(sizeof kMagic)) {
    const int error = errno;
    remove();
    throw Error("cannot write " + path_.string() + ": " + std::strerror(error), "write");
  }
}

Journal::~Journal() {
  if (fd_ >= 0) close(fd_);
}

void Journal::remove() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  unlink(path_.c_str());
}

void Journal::append(const std::string& payload) {
  if (fd_ < 0) throw Error("the journal " + path_.string() + " is closed");
  std::string record;
  record.reserve(payload.size() + 8);
  const std::uint32_t length = static_cast<std::uint32_t>(payload.size()), sum = checksum(payload.data(), payload.size());
  if (payload.size() != length) throw Error("a journal record over 4 GiB");
  record.append(reinterpret_cast<const char*>(&length), 4);
  record.append(reinterpret_cast<const char*>(&sum), 4);
  record += payload;
  // One write per record: a process killed between records leaves whole records only, and a
  // record cut by a full disk or a kill fails its checksum when read.
  std::size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      throw Error("cannot write " + path_.string() + ": " + std::strerror(error) +
                      (error == ENOSPC ? " (the disk is full: ENOSPC)" : ""),
                  "write");
    }
    done += static_cast<std::size_t>(n);
  }
}

void Journal::attribute(const std::string& group, const std::string& name, const Attribute& value) {
  Writer w;
  w.number<char>('A');
  w.text(group);
  w.text(name);
  encode_attribute(w, value);
  append(w.take());
}

void Journal::rows(const std::string& group, const Table& table, std::size_t first) {
  const std::size_t last = table.rows();
  if (first >= last) return;
  Writer w;
  w.number<char>('R');
  w.text(group);
  encode_rows(w, table, first, last);
  append(w.take());
}

void Journal::rows(const std::vector<RowsOf>& parts) {
  Writer w;
  // The groups first (a reader may count a group's records without decoding rows), then each
  // group's rows in that order.
  w.number<char>('M');
  w.text("");
  std::vector<std::string> groups;
  for (const RowsOf& part : parts) groups.push_back(part.group);
  w.list(groups);
  for (const RowsOf& part : parts) encode_rows(w, *part.table, std::min(part.first, part.table->rows()), part.table->rows());
  for (const RowsOf& part : parts) w.list(std::vector<std::uint64_t>(part.taken.begin(), part.taken.end()));
  append(w.take());
}

void Journal::table(const std::string& group, const Table& table) {
  Writer w;
  w.number<char>('T');
  w.text(group);
  encode_rows(w, table, 0, table.rows());
  append(w.take());
}

void Journal::carried(const std::string& group, const Table& table) {
  Writer w;
  w.number<char>('C');
  w.text(group);
  encode_rows(w, table, 0, table.rows());
  append(w.take());
}

namespace {
// Rows read back into their group: a whole table ('T') replaces what was there; rows are
// appended. False when the rows do not fit the table's columns (the reading ends there).
bool apply_rows(Contents& contents, const std::string& group, Table rows, bool whole) {
  auto& g = contents.group(group);
  if (whole || !g.table) {
    g.table = std::move(rows);
    g.complete = whole;
  } else if (!g.complete) {
    if (!same_columns(*g.table, rows)) return false;
    append_rows(*g.table, rows, 0, rows.rows());
  }
  return true;
}
}  // namespace

bool is_journal(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) == 0 && !ec)
    return true;  // made, and its run killed before it wrote its first bytes
  std::ifstream in(path, std::ios::binary);
  char head[sizeof kMagic] = {};
  return in.read(head, sizeof head) && std::memcmp(head, kMagic, sizeof kMagic) == 0;
}

namespace {
// Whether a whole record of a kind parity writes starts somewhere in data[from, end): a record
// whose length says more than the file holds is a torn tail (a write cut short leaves a prefix
// of one record, and nothing after it) unless records follow, when its length was damaged. The
// search checks at most 256 MiB of payloads, so a large torn tail costs a bounded time.
bool whole_record_after(const std::string& data, std::size_t from) {
  std::size_t checked = 0;
  for (std::size_t at = from; at + 9 <= data.size() && checked < (std::size_t{256} << 20); ++at) {
    std::uint32_t length = 0, sum = 0;
    std::memcpy(&length, data.data() + at, 4);
    if (length == 0 || length > data.size() - at - 8 || std::string_view("ARTMCK").find(data[at + 8]) == std::string_view::npos)
      continue;
    std::memcpy(&sum, data.data() + at + 4, 4);
    checked += length;
    if (checksum(data.data() + at + 8, length) == sum) return true;
  }
  return false;
}
}  // namespace

JournalReading read_journal(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read " + path.string() + ": " + std::strerror(errno));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  JournalReading reading;
  if (data.empty()) return reading;  // its run was killed before it wrote anything
  if (data.size() < sizeof kMagic || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0)
    throw UsageError(path.string() + " is not a parity journal");
  std::map<std::string, std::pair<Table, std::set<std::uint64_t>>> carried;  // rows carried, and those taken
  std::size_t at = sizeof kMagic;
  while (at < data.size()) {
    std::uint32_t length = 0, sum = 0;
    if (data.size() - at < 8) break;
    std::memcpy(&length, data.data() + at, 4);
    std::memcpy(&sum, data.data() + at + 4, 4);
    if (length > data.size() - at - 8) {  // torn: the write that held it was cut short
      if (whole_record_after(data, at + 8)) reading.damaged_at = at;  // or its length was damaged
      break;
    }
    if (checksum(data.data() + at + 8, length) != sum) {
      reading.damaged_at = at;
      break;
    }
    const std::string payload = data.substr(at + 8, length);
    try {
      Reader r(payload);
      const char kind = r.number<char>();
      const std::string group = r.text();
      if (kind == 'A') {
        const std::string name = r.text();
        reading.contents.set_attribute(group, name, decode_attribute(r));
      } else if (kind == 'R' || kind == 'T') {
        if (!apply_rows(reading.contents, group, decode_rows(r), kind == 'T')) {
          reading.damaged_at = at;  // rows that do not fit their table's columns
          break;
        }
      } else if (kind == 'M') {
        // Decoded whole before any is applied: the parts are taken together or not at all.
        std::vector<std::pair<std::string, Table>> parts;
        for (std::string& part_group : r.list<std::string>()) parts.emplace_back(std::move(part_group), Table());
        for (auto& part : parts) part.second = decode_rows(r);
        std::vector<std::vector<std::uint64_t>> taken(parts.size());  // none in older journals
        if (!r.at_end())
          for (auto& t : taken) t = r.list<std::uint64_t>();
        bool applied = true;
        for (auto& [part_group, rows] : parts) applied = applied && apply_rows(reading.contents, part_group, std::move(rows), false);
        if (!applied) {
          reading.damaged_at = at;
          break;
        }
        for (std::size_t i = 0; i < parts.size(); ++i) carried[parts[i].first].second.insert(taken[i].begin(), taken[i].end());
      } else if (kind == 'C') {
        carried[group] = {decode_rows(r), {}};
      } else if (kind == 'K') {
        carried[group].second.insert(r.number<std::uint64_t>());
      } else {
        reading.damaged_at = at;  // no kind parity writes
        break;
      }
    } catch (const Error&) {
      reading.damaged_at = at;
      break;  // a record that passed its checksum but does not decode: treat as the end
    }
    at += 8 + length;
    ++reading.records;
  }
  reading.ignored_bytes = data.size() - at;
  // Carried rows not taken yet follow the rows recorded (a run resumed from an interrupted one
  // takes them in order, so together they are the resumed table as it was).
  for (const auto& [group, entry] : carried) {
    const auto& [rows, taken] = entry;
    auto& g = reading.contents.group(group);
    if (g.complete || rows.rows() == 0) continue;
    if (!g.table) g.table = Table(rows.description());
    if (g.table->rows() > 0 && !same_columns(*g.table, rows)) continue;
    for (std::size_t row = 0; row < rows.rows(); ++row)
      if (!taken.count(row)) append_rows(*g.table, rows, row, row + 1);
  }
  return reading;
}

}  // namespace parity::record
