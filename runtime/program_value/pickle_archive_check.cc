#include "runtime/program_value/pickle_archive_check.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/versions.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace metafuse::runtime {
namespace {

// ---- the pickle: LibTorch 1.13's unpickler trusts its input too: it pops
// an empty stack, reads past its marks, reserves what a length field claims
// and gives a tensor the sizes and strides the pickle says, whatever its
// storage holds. So the pickle is first replayed on a model of the
// unpickler's stack, with the opcodes and globals LibTorch's pickler writes,
// and refused unless every step is well-formed: lengths inside the bytes,
// pops above the innermost mark, memo entries numbered in order, every
// storage inside its record, every tensor inside its storage, containers
// at most kMaxDepth deep and filled before they are nested (no cycles).

struct PickleValue {
  enum Kind { kScalar, kString, kTuple, kList, kDict, kStorage, kTensor, kGlobal } kind;
  int64_t number = 0;  // an integer's value; a storage's elements; which global
  std::string text;    // a string's value
  std::vector<std::shared_ptr<PickleValue>> items;  // a tuple's items
  int depth = 1;
  bool nested = false;  // inside a container: it may no longer grow
  bool is_int = false;
};
using PickleRef = std::shared_ptr<PickleValue>;

constexpr int kMaxDepth = 64;
// The dtypes a storage may have (the pickler's torch.<Type>Storage globals).
constexpr c10::ScalarType kStorageTypes[] = {
    at::kByte,  at::kChar,   at::kShort,        at::kInt,           at::kLong, at::kHalf,
    at::kFloat, at::kDouble, at::kComplexFloat, at::kComplexDouble, at::kBool, at::kBFloat16};
enum PickleGlobal : int64_t { kRebuildTensor, kRestoreTypeTag, kBuildList, kOrderedDict, kDevice };

class PickleReplay {
 public:
  PickleReplay(absl::string_view pickle, const std::map<std::string, absl::string_view>& members,
               const std::string& folder)
      : p_(pickle), members_(members), folder_(folder) {}

  absl::Status Run() {
    if (!Byte(0x80) || Next(1) != 2) return Bad("not a protocol-2 pickle");
    while (error_.empty()) {
      if (at_ >= p_.size()) return Bad("no STOP");
      const uint8_t op = static_cast<uint8_t>(p_[at_++]);
      if (op == '.') break;
      Step(op);
    }
    if (!error_.empty()) return absl::DataLossError(error_);
    if (at_ != p_.size() || stack_.size() != 1 || !marks_.empty()) {
      return Bad("not one value ending the pickle");
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Bad(const std::string& what) {
    if (error_.empty()) {
      error_ = absl::StrCat("the pickle is damaged at byte ", at_, " (", what, ")");
    }
    return absl::DataLossError(error_);
  }
  bool Fail(const std::string& what) {
    (void)Bad(what);
    return false;
  }
  bool Byte(uint8_t expected) {
    return at_ < p_.size() && static_cast<uint8_t>(p_[at_++]) == expected;
  }
  // A little-endian field of `bytes` bytes; past the end sets the error.
  uint64_t Next(int bytes) {
    if (p_.size() - at_ < static_cast<size_t>(bytes)) {
      Fail("a field runs past the end");
      at_ = p_.size();
      return 0;
    }
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p_[at_ + i]);
    at_ += bytes;
    return v;
  }
  PickleRef Make(PickleValue::Kind kind) {
    auto v = std::make_shared<PickleValue>();
    v->kind = kind;
    return v;
  }
  void Push(PickleRef v) { stack_.push_back(std::move(v)); }
  PickleRef Int(int64_t value) {
    PickleRef v = Make(PickleValue::kScalar);
    v->number = value;
    v->is_int = true;
    return v;
  }
  // How many values above the innermost mark.
  size_t Free() const { return stack_.size() - (marks_.empty() ? 0 : marks_.back()); }
  std::vector<PickleRef> Pop(size_t n) {
    if (Free() < n) {
      Fail("a pop below the stack or its mark");
      return {};
    }
    std::vector<PickleRef> out(stack_.end() - n, stack_.end());
    stack_.resize(stack_.size() - n);
    return out;
  }
  // The values since the innermost mark, and the mark.
  std::vector<PickleRef> PopMark() {
    if (marks_.empty()) {
      Fail("no mark");
      return {};
    }
    std::vector<PickleRef> out(stack_.begin() + marks_.back(), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return out;
  }
  // `items` go into `container` (a new tuple, or a list or dict not yet
  // nested).
  bool Nest(PickleValue& container, const std::vector<PickleRef>& items) {
    if (container.nested) return Fail("a container grown after it was nested");
    for (const PickleRef& item : items) {
      if (item.get() == &container) return Fail("a container inside itself");
      item->nested = true;
      container.depth = std::max(container.depth, item->depth + 1);
    }
    return container.depth <= kMaxDepth || Fail("values nested too deep");
  }
  PickleRef Tuple(std::vector<PickleRef> items) {
    PickleRef t = Make(PickleValue::kTuple);
    if (!Nest(*t, items)) return nullptr;
    t->items = std::move(items);
    return t;
  }
  bool IntTuple(const PickleRef& v, std::vector<int64_t>* out) {
    if (v->kind != PickleValue::kTuple) return false;
    for (const PickleRef& item : v->items) {
      if (!item->is_int || item->number < 0) return false;
      out->push_back(item->number);
    }
    return true;
  }

  void Step(uint8_t op) {
    switch (op) {
      case '(':
        marks_.push_back(stack_.size());
        break;
      case ')':
        Push(Make(PickleValue::kTuple));
        break;
      case ']':
        Push(Make(PickleValue::kList));
        break;
      case '}':
        Push(Make(PickleValue::kDict));
        break;
      case 'N':
      case 0x88:
      case 0x89:
        Push(Make(PickleValue::kScalar));
        break;
      case 'K':
        Push(Int(static_cast<int64_t>(Next(1))));
        break;
      case 'M':
        Push(Int(static_cast<int64_t>(Next(2))));
        break;
      case 'J':
        Push(Int(static_cast<int32_t>(Next(4))));
        break;
      case 0x8a:
        if (Next(1) != 8) return void(Fail("a LONG1 of other than 8 bytes"));
        Push(Int(static_cast<int64_t>(Next(8))));
        break;
      case 'G':
        Next(8), Push(Make(PickleValue::kScalar));
        break;
      case 'X': {
        const uint64_t length = Next(4);
        if (length > p_.size() - at_) return void(Fail("a string longer than the pickle"));
        PickleRef v = Make(PickleValue::kString);
        v->text = std::string(p_.substr(at_, length));
        at_ += length;
        Push(std::move(v));
        break;
      }
      case 't':
        if (PickleRef t = Tuple(PopMark())) Push(std::move(t));
        break;
      case 0x85:
      case 0x86:
      case 0x87:
        if (PickleRef t = Tuple(Pop(op - 0x84))) Push(std::move(t));
        break;
      case 'l':
      case 'd': {
        std::vector<PickleRef> items = PopMark();
        if (op == 'd' && items.size() % 2 != 0) return void(Fail("a dict of an odd count"));
        PickleRef c = Make(op == 'l' ? PickleValue::kList : PickleValue::kDict);
        if (Nest(*c, items)) Push(std::move(c));
        break;
      }
      case 'e':
      case 'u': {
        if (marks_.empty() || marks_.back() == 0) return void(Fail("no container before the mark"));
        PickleRef container = stack_[marks_.back() - 1];
        std::vector<PickleRef> items = PopMark();
        if (container->kind != (op == 'e' ? PickleValue::kList : PickleValue::kDict) ||
            (op == 'u' && items.size() % 2 != 0)) {
          return void(Fail("items for something that does not hold them"));
        }
        Nest(*container, items);
        break;
      }
      case 'q':
      case 'r': {
        const uint64_t id = Next(op == 'q' ? 1 : 4);
        if (stack_.empty() || id > memo_.size()) return void(Fail("a memo entry out of order"));
        if (id == memo_.size())
          memo_.push_back(stack_.back());
        else
          memo_[id] = stack_.back();
        break;
      }
      case 'h':
      case 'j': {
        const uint64_t id = Next(op == 'h' ? 1 : 4);
        if (id >= memo_.size()) return void(Fail("a memo entry never stored"));
        Push(memo_[id]);
        break;
      }
      case 'c':
        Global();
        break;
      case 'R':
      case 'b':
        Reduce();
        break;
      case 'Q':
        Storage();
        break;
      default:
        Fail(absl::StrCat("opcode ", static_cast<int>(op), " is not one LibTorch writes"));
    }
  }

  std::string Line() {
    const size_t end = p_.find('\n', at_);
    if (end == absl::string_view::npos || end - at_ > 200) {
      Fail("a global's name is not a line");
      return "";
    }
    std::string line(p_.substr(at_, end - at_));
    at_ = end + 1;
    return line;
  }

  void Global() {
    const std::string module = Line(), name = Line();
    if (!error_.empty()) return;
    PickleRef g = Make(PickleValue::kGlobal);
    if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
      g->number = kRebuildTensor;
    } else if (module == "torch.jit._pickle" && name == "restore_type_tag") {
      g->number = kRestoreTypeTag;
    } else if (module == "torch.jit._pickle" &&
               (name == "build_intlist" || name == "build_tensorlist" ||
                name == "build_doublelist" || name == "build_boollist")) {
      g->number = kBuildList;
    } else if (module == "collections" && name == "OrderedDict") {
      g->number = kOrderedDict;
    } else if (module == "torch" && name == "device") {
      g->number = kDevice;
    } else if (module == "torch" && absl::EndsWith(name, "Storage")) {
      // torch.<Type>Storage stands for its dtype, an integer.
      for (c10::ScalarType t : kStorageTypes) {
        if (name == absl::StrCat(c10::toString(t), "Storage"))
          return Push(Int(static_cast<int64_t>(t)));
      }
      return void(Fail("an unknown storage type"));
    } else {
      return void(
          Fail(absl::StrCat("the global ", module, ".", name, " is not one a program uses")));
    }
    Push(std::move(g));
  }

  // ('storage', dtype, key, location, numel) -> a storage of numel elements,
  // which its record data/<key> must hold.
  void Storage() {
    std::vector<PickleRef> arg = Pop(1);
    if (arg.empty()) return;
    const auto& items = arg[0]->items;
    if (arg[0]->kind != PickleValue::kTuple || items.size() != 5 ||
        items[0]->kind != PickleValue::kString || items[0]->text != "storage" ||
        !items[1]->is_int ||
        std::none_of(
            std::begin(kStorageTypes), std::end(kStorageTypes),
            [&](c10::ScalarType t) { return static_cast<int64_t>(t) == items[1]->number; }) ||
        items[2]->kind != PickleValue::kString || items[3]->kind != PickleValue::kString ||
        !items[4]->is_int || items[4]->number < 0) {
      return void(
          Fail("a storage reference that is not ('storage', dtype, key, "
               "device, numel)"));
    }
    const auto record = members_.find(absl::StrCat(folder_, "data/", items[2]->text));
    const uint64_t element = c10::elementSize(static_cast<c10::ScalarType>(items[1]->number));
    if (record == members_.end() ||
        static_cast<uint64_t>(items[4]->number) > record->second.size() / element) {
      return void(Fail(absl::StrCat("storage ", items[2]->text, " is larger than its record")));
    }
    PickleRef s = Make(PickleValue::kStorage);
    s->number = items[4]->number;
    Push(std::move(s));
  }

  // REDUCE (and BUILD, which LibTorch treats alike): global, argument ->
  // result.
  void Reduce() {
    std::vector<PickleRef> pair = Pop(2);
    if (pair.empty()) return;
    const PickleRef& arg = pair[1];
    if (pair[0]->kind != PickleValue::kGlobal)
      return void(Fail("a call of something not a global"));
    if (pair[0]->number == kOrderedDict) return Push(Make(PickleValue::kScalar));
    if (arg->kind != PickleValue::kTuple || arg->items.empty()) {
      return void(Fail("a global called without its arguments"));
    }
    const PickleRef& first = arg->items[0];
    switch (pair[0]->number) {
      case kBuildList:
        if (first->kind != PickleValue::kList) return void(Fail("a typed list of no list"));
        return Push(first);
      case kDevice:  // torch.device('cpu'): LibTorch parses the name
        if (first->kind != PickleValue::kString) return void(Fail("a device without its name"));
        return Push(Make(PickleValue::kScalar));
      case kRestoreTypeTag:
        if ((first->kind != PickleValue::kList && first->kind != PickleValue::kDict) ||
            arg->items.size() < 2 || arg->items[1]->kind != PickleValue::kString ||
            !TypeName(arg->items[1]->text)) {
          return void(Fail("a type tag that is not (container, type name)"));
        }
        return Push(first);
      default: {  // _rebuild_tensor_v2(storage, offset, sizes, strides,
                  // requires_grad, ...)
        std::vector<int64_t> sizes, strides;
        if (arg->items.size() < 5 || first->kind != PickleValue::kStorage ||
            !arg->items[1]->is_int || arg->items[1]->number < 0 ||
            !IntTuple(arg->items[2], &sizes) || !IntTuple(arg->items[3], &strides) ||
            sizes.size() != strides.size() || sizes.size() > 64) {
          return void(Fail("a tensor that is not (storage, offset, sizes, strides, ...)"));
        }
        // The last element it reaches must lie in its storage; it may show
        // more elements than that (a broadcast view, stride 0), but no more
        // than an int64 counts.
        int64_t last = arg->items[1]->number, count = 1;
        bool empty = false;
        for (size_t d = 0; d < sizes.size(); ++d) {
          int64_t reach = 0;
          empty = empty || sizes[d] == 0;
          if (sizes[d] > 0 && (__builtin_mul_overflow(sizes[d] - 1, strides[d], &reach) ||
                               __builtin_add_overflow(last, reach, &last))) {
            return void(Fail("a tensor larger than any storage"));
          }
          if (__builtin_mul_overflow(count, sizes[d], &count)) {
            return void(Fail("a tensor of more elements than an int64 counts"));
          }
        }
        if (!empty && last >= first->number) {
          return void(Fail("a tensor reaching outside its storage"));
        }
        PickleRef t = Make(PickleValue::kTensor);
        Push(std::move(t));
      }
    }
  }

  // A TorchScript type name as the pickler writes one: List[int], Dict[str,
  // Tensor].
  static bool TypeName(const std::string& text) {
    int depth = 0;
    for (char c : text) {
      depth += c == '[' ? 1 : c == ']' ? -1 : 0;
      if (depth < 0 || depth > 8 ||
          !(std::isalnum(static_cast<unsigned char>(c)) || c == '[' || c == ']' || c == ',' ||
            c == ' ' || c == '_' || c == '.' || c == '?')) {
        return false;
      }
    }
    return depth == 0 && !text.empty() && text.size() <= 200;
  }

  absl::string_view p_;
  const std::map<std::string, absl::string_view>& members_;
  const std::string& folder_;
  size_t at_ = 0;
  std::vector<PickleRef> stack_, memo_;
  std::vector<size_t> marks_;
  std::string error_;
};

absl::Status CheckPickle(absl::string_view pickle,
                         const std::map<std::string, absl::string_view>& members,
                         const std::string& folder) {
  return PickleReplay(pickle, members, folder).Run();
}

// ---- the container: LibTorch's zip reader (miniz behind PyTorchStreamReader,
// torch 1.13) trusts the archive's offsets and sizes and skips its CRC
// checks, so damaged bytes make it read outside them or allocate what a size
// field claims. The bytes reach it only as the writer makes them: one zip of
// stored members, no comment, the directory, a zip64 end record and its
// locator (miniz writes them; miniz reads their fields rather than the end
// record's, so both must agree), then the end record; every member inside
// the bytes with the CRC-32 the directory says.

uint32_t Crc32(const char* data, size_t size) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i)
    c = table[(c ^ static_cast<uint8_t>(data[i])) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

}  // namespace

absl::Status CheckPickleArchive(const std::string& b) {
  auto u16 = [&b](size_t at) -> uint32_t {
    return static_cast<uint8_t>(b[at]) | static_cast<uint8_t>(b[at + 1]) << 8;
  };
  auto u32 = [&](size_t at) -> uint32_t { return u16(at) | u16(at + 2) << 16; };
  auto u64 = [&](size_t at) -> uint64_t { return u32(at) | uint64_t{u32(at + 4)} << 32; };
  auto bad = [](const std::string& what) {
    return absl::DataLossError(
        absl::StrCat("not a complete pickle archive (", what, "): truncated or damaged"));
  };
  constexpr size_t kEnd = 22, kCentral = 46, kLocal = 30, kZip64End = 56, kLocator = 20;
  if (b.size() < kEnd || u32(b.size() - kEnd) != 0x06054b50u) return bad("no end record");
  const size_t end = b.size() - kEnd;
  const uint32_t count = u16(end + 10), directory_size = u32(end + 12), directory = u32(end + 16);
  if (u16(end + 4) != 0 || u16(end + 6) != 0 || u16(end + 8) != count || count == 0 ||
      u16(end + 20) != 0) {
    return bad("the end record describes more than one directory, or a comment");
  }
  size_t directory_end = end;
  if (end >= kLocator && u32(end - kLocator) == 0x07064b50u) {
    if (end < kLocator + kZip64End) return bad("a truncated zip64 end record");
    const size_t record = end - kLocator - kZip64End;
    if (u32(end - 16) != 0 || u64(end - 12) != record || u32(end - 4) != 1 ||
        u32(record) != 0x06064b50u || u64(record + 4) != kZip64End - 12 || u32(record + 16) != 0 ||
        u32(record + 20) != 0 || u64(record + 24) != count || u64(record + 32) != count ||
        u64(record + 40) != directory_size || u64(record + 48) != directory) {
      return bad("the zip64 end record disagrees with the end record");
    }
    directory_end = record;
  }
  if (directory > directory_end || directory_size != directory_end - directory) {
    return bad("the directory is not where the end record says");
  }
  size_t at = directory;
  std::map<std::string, absl::string_view> members;  // name -> contents
  std::string first_name;
  for (uint32_t k = 0; k < count; ++k) {
    const std::string entry = absl::StrCat("directory entry ", k);
    if (kCentral > directory_end - at || u32(at) != 0x02014b50u) return bad(entry + " is damaged");
    const uint32_t flags = u16(at + 8), method = u16(at + 10), crc = u32(at + 16),
                   stored = u32(at + 20), size = u32(at + 24), name = u16(at + 28),
                   extra = u16(at + 30), comment = u16(at + 32), local = u32(at + 42);
    // Flags: only the data descriptor, UTF-8 names and compression options
    // (miniz refuses encrypted and patch entries, after the reader's
    // constructor has opened the archive: that exception leaks).
    if ((flags & ~0x080Eu) != 0 || method != 0 || stored != size || size == 0xFFFFFFFFu ||
        local == 0xFFFFFFFFu || u16(at + 34) != 0) {
      return bad(entry + " is not a plain stored member");
    }
    if (name + extra + comment > directory_end - at - kCentral) {
      return bad(entry + " reaches past the directory");
    }
    // Not a directory, by name or by its DOS attribute: miniz reads no data
    // for one and hands back uninitialized bytes.
    if ((u32(at + 38) & 0x10) != 0 || (name > 0 && b[at + kCentral + name - 1] == '/')) {
      return bad(entry + " is a directory");
    }
    if (local > directory || kLocal > directory - local || u32(local) != 0x04034b50u) {
      return bad(entry + ": its local header is damaged");
    }
    const size_t data = local + kLocal + u16(local + 26) + u16(local + 28);
    if (data > directory || size > directory - data) return bad(entry + ": its data is truncated");
    if (Crc32(b.data() + data, size) != crc) return bad(entry + ": its CRC-32 differs");
    const std::string member_name = b.substr(at + kCentral, name);
    if (k == 0) first_name = member_name;
    members.emplace(member_name, absl::string_view(b).substr(data, size));
    at += kCentral + name + extra + comment;
  }
  if (at != directory_end) return bad("the directory holds more than its entries");
  // What the reader's constructor checks (an exception there leaks its zip
  // state): every record in the first one's folder, a readable version.
  const size_t slash = first_name.find('/');
  if (slash == std::string::npos) return bad("the first member is not in a folder");
  const std::string folder = first_name.substr(0, slash + 1);
  auto version = members.find(folder + ".data/version");
  if (version == members.end()) version = members.find(folder + "version");
  if (version == members.end()) return bad("no version record");
  std::string digits(version->second);
  if (!digits.empty() && digits.back() == '\n') digits.pop_back();
  uint64_t number = 0;
  if (digits.empty() || digits.size() > 3 ||
      digits.find_first_not_of("0123456789") != std::string::npos ||
      (number = std::stoull(digits)) < caffe2::serialize::kMinSupportedFileFormatVersion ||
      number > caffe2::serialize::kMaxSupportedFileFormatVersion) {
    return bad("a version record that is not a supported version");
  }
  auto pickle = members.find(folder + "data.pkl");
  if (pickle == members.end()) return bad("no data.pkl record");
  return CheckPickle(pickle->second, members, folder);
}


}  // namespace metafuse::runtime
