// ParseServedJson: the served documents' DOM, built by a SAX handler that
// drops managedFields and the fields a FieldFilter does not keep.
#include <string_view>
#include <vector>

#include "operator/kube/client.h"

namespace kubetrain::kube {

using json = nlohmann::json;

namespace {

// Builds the DOM of a served document as json::parse does, minus the served
// objects' metadata.managedFields (if dropped) and the fields a FieldFilter
// does not keep: a SAX handler, so a skipped value is never
// built and a kept key costs no more than in json::parse (a parse callback
// copies every key into a json string and calls through std::function).
class ServedDomBuilder {
 public:
  ServedDomBuilder(ServedShape shape, bool drop_managed_fields, const FieldFilter* fields)
      : watch_event_(shape == ServedShape::kWatchEvent),
        drop_managed_fields_(drop_managed_fields),
        fields_(fields) {
    // The keys (or array levels, "") from the document down to the object
    // whose metadata.managedFields is dropped, "metadata" included.
    switch (shape) {
      case ServedShape::kObject:
        path_ = {"metadata"};
        break;
      case ServedShape::kList:
        path_ = {"items", "", "metadata"};
        break;
      case ServedShape::kWatchEvent:
        path_ = {"object", "metadata"};
        break;
    }
  }

  json Take() { return std::move(root_); }

  bool null() { return Value(nullptr); }
  bool boolean(bool v) { return Value(v); }
  bool number_integer(json::number_integer_t v) { return Value(v); }
  bool number_unsigned(json::number_unsigned_t v) { return Value(v); }
  bool number_float(json::number_float_t v, const json::string_t&) { return Value(v); }
  bool string(json::string_t& v) {
    // A watch event's type comes before its object (the apiserver writes
    // them in that order): an ERROR event's object is a Status, not one of
    // the watched objects, and is built whole (its code says 410 Gone).
    if (watch_event_ && stack_.size() == 1 && type_key_ && v == "ERROR") error_event_ = true;
    return Value(std::move(v));
  }
  bool binary(json::binary_t& v) { return Value(json::binary(std::move(v))); }

  bool start_object(std::size_t) { return Open(json::value_t::object); }
  bool start_array(std::size_t) { return Open(json::value_t::array); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }

  bool key(json::string_t& k) {
    if (skip_depth_ > 0) return true;
    Frame& f = stack_.back();
    if (f.matched == Steps() && drop_managed_fields_ && k == "managedFields") {
      skip_next_ = true;
      return true;
    }
    if (stack_.size() == 1) type_key_ = k == "type";
    next_keep_ = nullptr;
    if (f.keep != nullptr) {
      auto kept = std::find_if(f.keep->begin(), f.keep->end(),
                               [&](const KeptField& field) { return field.name == k; });
      if (kept == f.keep->end()) {
        skip_next_ = true;
        return true;
      }
      if (!kept->fields.empty()) next_keep_ = &kept->fields;
    }
    f.key_matches = KeyStep(f.matched, k);
    slot_ = &(*f.node)[std::move(k)];
    return true;
  }

  template <class Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& ex) {
    throw ex;
  }

 private:
  struct Frame {
    json* node;
    // How many steps of path_ lead here; -1 when off the path.
    int matched;
    // The fields of this object (of this array's elements) kept; null: all.
    const FieldFilter* keep = nullptr;
    bool key_matches = false;  // an object's last key is the next step
  };

  int Steps() const { return static_cast<int>(path_.size()); }
  // Whether step `i` of path_ is key `k` (an object's member), or an array's
  // element ("" in path_).
  bool KeyStep(int i, std::string_view k) const {
    return i >= 0 && i < Steps() && !path_[static_cast<size_t>(i)].empty() &&
           path_[static_cast<size_t>(i)] == k;
  }
  bool ElementStep(int i) const {
    return i >= 0 && i < Steps() && path_[static_cast<size_t>(i)].empty();
  }

  // Where the next value goes: the document, an array's end or the slot of
  // the object's last key. Returns it with the path steps matched there.
  json* Place(json&& v, int* matched) {
    if (stack_.empty()) {
      root_ = std::move(v);
      *matched = 0;
      return &root_;
    }
    Frame& f = stack_.back();
    const bool array = f.node->is_array();
    const bool on_path = array ? ElementStep(f.matched) : f.key_matches;
    *matched = on_path ? f.matched + 1 : -1;
    if (array) {
      f.node->push_back(std::move(v));
      return &f.node->back();
    }
    *slot_ = std::move(v);
    return slot_;
  }

  template <class T>
  bool Value(T&& v) {
    if (skip_depth_ > 0) return true;
    if (skip_next_) {
      skip_next_ = false;
      return true;
    }
    int matched;
    Place(json(std::forward<T>(v)), &matched);
    return true;
  }

  bool Open(json::value_t type) {
    if (skip_depth_ > 0 || skip_next_) {
      skip_next_ = false;
      ++skip_depth_;
      return true;
    }
    // What of the new container is kept: the served object (one step above
    // its metadata on the path) is filtered by fields_; below it, a member
    // by its field's filter and an array's elements as the array.
    const FieldFilter* keep = nullptr;
    if (!stack_.empty()) keep = stack_.back().node->is_array() ? stack_.back().keep : next_keep_;
    int matched;
    json* node = Place(json(type), &matched);
    if (matched == Steps() - 1) keep = error_event_ ? nullptr : fields_;
    stack_.push_back(Frame{node, matched, keep});
    return true;
  }

  bool Close() {
    if (skip_depth_ > 0) {
      --skip_depth_;
      return true;
    }
    stack_.pop_back();
    return true;
  }

  const bool watch_event_;
  const bool drop_managed_fields_;
  const FieldFilter* const fields_;
  bool type_key_ = false;     // the document's last key was "type"
  bool error_event_ = false;  // a watch event of type ERROR: its object is kept whole
  std::vector<std::string_view> path_;
  json root_;
  std::vector<Frame> stack_;
  json* slot_ = nullptr;
  const FieldFilter* next_keep_ = nullptr;  // the filter of the last key's value
  bool skip_next_ = false;  // the next value is not kept (managedFields, filtered out)
  int skip_depth_ = 0;      // containers open inside a dropped value
};

}  // namespace

StatusOr<json> ParseServedJson(std::string_view text, ServedShape shape, bool drop_managed_fields,
                               const FieldFilter* fields) {
  try {
    if (!drop_managed_fields && fields == nullptr) return json::parse(text);
    ServedDomBuilder builder(shape, drop_managed_fields, fields);
    json::sax_parse(text, &builder);
    return builder.Take();
  } catch (const json::exception& e) {
    return InvalidArgument(e.what());
  }
}

}  // namespace kubetrain::kube
