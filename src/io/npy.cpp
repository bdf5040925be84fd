// .npy reading and writing (numpy format 1.0-3.0; see include/epifuse/npy.hpp).
//
// The format: the magic "\x93NUMPY", a major and minor version byte, the header
// length (uint16 little-endian for 1.0, uint32 for 2.0 and 3.0), then the header:
// a Python dict literal `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`
// padded with spaces and ended by '\n', then the raw C-order data.
#include "epifuse/npy.hpp"

#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "epifuse/errors.hpp"
#include "io/atomic_file.hpp"
#include "ir/limits.hpp"

namespace epifuse {

static_assert(std::endian::native == std::endian::little,
              "npy.cpp copies little-endian data as it is; a big-endian host needs byte swaps");

namespace {

constexpr char k_magic[] = "\x93NUMPY";
constexpr std::size_t k_magic_len = 6;
// A single dimension or element count beyond these is a corrupt header, not data:
// the same bounds verify_shape puts on problem shapes.
using limits::k_max_dim;
constexpr std::int64_t k_max_elems = limits::k_max_elements;
// numpy's own limit for headers it will read without allow_pickle-like opt-ins.
constexpr std::size_t k_max_header = 1u << 20;

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
};

// A strict parser for the header dict: string keys; values are strings, True/False,
// or tuples of non-negative integers. Anything else (lists of fields for structured
// dtypes, nested dicts) is reported as unsupported rather than half-understood.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::filesystem::path& path)
      : text_(text), path_(path) {}

  NpyHeader parse() {
    NpyHeader h;
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') {
        ++pos_;
        break;
      }
      std::string key = parse_string();
      expect(':');
      if (key == "descr") {
        skip_space();
        if (peek() != '\'' && peek() != '"')
          fail("structured dtypes are not supported (descr is not a plain type string)");
        h.descr = parse_string();
        have_descr = true;
      } else if (key == "fortran_order") {
        h.fortran_order = parse_bool();
        have_order = true;
      } else if (key == "shape") {
        h.shape = parse_shape();
        have_shape = true;
      } else {
        fail(fmt::format("unexpected key '{}' in the header", key));
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      break;
    }
    skip_space();
    if (pos_ != text_.size()) fail("trailing characters after the header dict");
    if (!have_descr || !have_order || !have_shape)
      fail("the header must have 'descr', 'fortran_order' and 'shape'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw UserError(fmt::format("{}: not a valid .npy file: {}", path_.string(), why));
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(fmt::format("expected '{}' at header offset {}", c, pos_));
    ++pos_;
  }
  std::string parse_string() {
    skip_space();
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail(fmt::format("expected a string at header offset {}", pos_));
    const std::size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) fail("unterminated string in the header");
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return s;
  }
  bool parse_bool() {
    skip_space();
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    fail("'fortran_order' must be True or False");
  }
  std::vector<std::int64_t> parse_shape() {
    std::vector<std::int64_t> shape;
    expect('(');
    while (true) {
      skip_space();
      if (peek() == ')') {
        ++pos_;
        return shape;
      }
      std::int64_t d = 0;
      const char* first = text_.data() + pos_;
      const char* last = text_.data() + text_.size();
      if (peek() == '-') fail("negative dimension in 'shape'");
      auto [ptr, ec] = std::from_chars(first, last, d);
      if (ec != std::errc{} || ptr == first) fail("'shape' must be a tuple of integers");
      pos_ += static_cast<std::size_t>(ptr - first);
      // Python 2 era files may write long integers as `3L`.
      if (peek() == 'L') ++pos_;
      if (d > k_max_dim) fail(fmt::format("dimension {} is too large (at most 2^40)", d));
      shape.push_back(d);
      if (shape.size() > 32) fail("more than 32 dimensions");
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(')');
      return shape;
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  const std::filesystem::path& path_;
};

// Maps a numpy type string to the dtype it stores (npy.hpp documents the bf16 convention).
std::optional<DType> dtype_from_descr(std::string_view d) {
  // '=' is native order, which is little-endian on every host this file builds on.
  if (d.size() == 3 && (d[0] == '<' || d[0] == '=')) {
    const std::string_view t = d.substr(1);
    if (t == "f4") return DType::f32;
    if (t == "f2") return DType::f16;
    if (t == "u2") return DType::bf16;
  }
  return std::nullopt;
}

std::string_view descr_of(DType t) {
  switch (t) {
    case DType::f32: return "<f4";
    case DType::f16: return "<f2";
    case DType::bf16: return "<u2";
  }
  EPIFUSE_ASSERT(false, "unknown dtype");
}

std::string shape_str(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::uint32_t read_le(const unsigned char* p, int bytes) {
  std::uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

HostTensor read_npy(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw UserError(fmt::format("{}: is a directory, not an .npy file", name));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(fmt::format("{}: cannot open: {}", name, std::strerror(errno)));
  const auto file_size = std::filesystem::file_size(path, ec);
  if (ec) throw UserError(fmt::format("{}: cannot read its size: {}", name, ec.message()));

  unsigned char pre[12] = {};
  in.read(reinterpret_cast<char*>(pre), 10);
  if (in.gcount() < 10 || std::memcmp(pre, k_magic, k_magic_len) != 0)
    throw UserError(fmt::format("{}: not an .npy file (no \\x93NUMPY magic)", name));
  const int major = pre[6], minor = pre[7];
  if (major < 1 || major > 3 || minor != 0)
    throw UserError(fmt::format("{}: unsupported .npy format version {}.{} (epifuse reads 1.0, 2.0, 3.0)",
                                name, major, minor));
  std::size_t header_len = 0, prefix = 10;
  if (major == 1) {
    header_len = read_le(pre + 8, 2);
  } else {
    in.read(reinterpret_cast<char*>(pre + 10), 2);
    if (in.gcount() < 2) throw UserError(fmt::format("{}: not a valid .npy file: truncated header", name));
    header_len = read_le(pre + 8, 4);
    prefix = 12;
  }
  if (header_len > k_max_header || prefix + header_len > file_size)
    throw UserError(fmt::format("{}: not a valid .npy file: header length {} exceeds the file ({} bytes)",
                                name, header_len, file_size));
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  if (static_cast<std::size_t>(in.gcount()) != header_len)
    throw UserError(fmt::format("{}: not a valid .npy file: truncated header", name));

  const NpyHeader h = HeaderParser(header, path).parse();
  const std::optional<DType> dtype = dtype_from_descr(h.descr);
  if (!dtype) {
    const bool big = !h.descr.empty() && h.descr[0] == '>';
    throw UserError(fmt::format(
        "{}: {} dtype '{}'; epifuse reads little-endian '<f4' (f32), '<f2' (f16) and '<u2' "
        "(bf16 bits){}",
        name, big ? "big-endian" : "unsupported", h.descr,
        big ? "; convert with arr.astype(arr.dtype.newbyteorder('<'))"
            : (h.descr == "<f8" ? "; convert with arr.astype(np.float32)" : "")));
  }
  std::int64_t numel = 1;
  for (std::int64_t d : h.shape) {
    if (d != 0 && numel > k_max_elems / d)
      throw UserError(fmt::format("{}: shape {} has too many elements (at most 2^48)", name, shape_str(h.shape)));
    numel *= d;
  }
  // A Fortran-order array of one dimension or fewer is laid out as in C order.
  std::int64_t non_unit = 0;
  for (std::int64_t d : h.shape) non_unit += d > 1;
  if (h.fortran_order && non_unit > 1)
    throw UserError(fmt::format("{}: Fortran-order arrays are not supported; save np.ascontiguousarray(arr)", name));

  const std::uint64_t data_bytes = static_cast<std::uint64_t>(numel) * size_of(*dtype);
  const std::uint64_t have = file_size - prefix - header_len;
  if (have < data_bytes)
    throw UserError(fmt::format("{}: truncated: shape {} of {} needs {} data bytes, the file has {}", name,
                                shape_str(h.shape), h.descr, data_bytes, have));
  if (have > data_bytes)
    throw UserError(fmt::format("{}: not a valid .npy file: {} bytes after the data of shape {}", name,
                                have - data_bytes, shape_str(h.shape)));

  HostTensor t;
  t.dtype = *dtype;
  t.shape = h.shape;
  t.bytes.resize(static_cast<std::size_t>(data_bytes));
  in.read(reinterpret_cast<char*>(t.bytes.data()), static_cast<std::streamsize>(data_bytes));
  if (static_cast<std::uint64_t>(in.gcount()) != data_bytes)
    throw UserError(fmt::format("{}: truncated while reading the data", name));
  return t;
}

void write_npy(const std::filesystem::path& path, const HostTensor& t) {
  std::int64_t numel = 1;
  for (std::int64_t d : t.shape) {
    EPIFUSE_ASSERT(d >= 0, "negative dimension in a HostTensor");
    numel *= d;
  }
  EPIFUSE_ASSERT(t.bytes.size() == static_cast<std::size_t>(numel) * size_of(t.dtype),
                 "HostTensor of shape {} holds {} bytes", shape_str(t.shape), t.bytes.size());

  std::string dims;
  for (std::int64_t d : t.shape) dims += fmt::format("{}, ", d);
  if (t.shape.size() > 1) dims.resize(dims.size() - 2);  // (2, 3); a 1-tuple keeps its comma: (3,)
  else if (t.shape.size() == 1) dims.pop_back();
  std::string dict =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr_of(t.dtype), dims);
  // Pad with spaces so that magic + version + length + header is a multiple of 64
  // (numpy's own alignment, so the data can be memory-mapped aligned); '\n' ends it.
  std::size_t total = 10 + dict.size() + 1;
  const bool v2 = (total + 63) / 64 * 64 - 10 > 65535;  // the 1.0 length field is 16 bits
  if (v2) total += 2;
  const std::size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict.push_back('\n');

  std::string prefix(k_magic, k_magic_len);
  prefix.push_back(static_cast<char>(v2 ? 2 : 1));
  prefix.push_back(0);
  const std::uint32_t len = static_cast<std::uint32_t>(dict.size());
  for (int i = 0; i < (v2 ? 4 : 2); ++i) prefix.push_back(static_cast<char>((len >> (8 * i)) & 0xFF));

  // Note [Atomic output files]: the destination is whole or as it was.
  io::AtomicFile out(path);
  out.write(prefix.data(), prefix.size());
  out.write(dict.data(), dict.size());
  out.write(t.bytes.data(), t.bytes.size());
  out.commit();
}

}  // namespace epifuse
