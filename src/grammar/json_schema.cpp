#include "grammar/json_schema.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <vector>

#include "core/error.hpp"
#include "grammar/gbnf.hpp"
#include "grammar/regex.hpp"

namespace syslm::grammar {
namespace {

using json = nlohmann::ordered_json;

std::string literal(const std::string& text) {
    return gbnf_literal(text);
}

std::string repeat_digits(int min, int max) {  // [0-9]{min,max}
    if (max <= 0) return "";
    return "[0-9]{" + std::to_string(min) + "," + std::to_string(max) + "}";
}

// Decimal strings of equal length n (leading zeros allowed) from lo to hi, as GBNF.
std::string same_length(const std::string& lo, const std::string& hi) {
    if (lo.empty()) return "\"\"";
    if (lo.size() == 1) return lo == hi ? literal(lo) : "[" + lo + "-" + hi + "]";
    const char a = lo[0], b = hi[0];
    const std::string lrest = lo.substr(1), hrest = hi.substr(1);
    if (a == b) return "(" + literal(std::string(1, a)) + " " + same_length(lrest, hrest) + ")";
    const std::string nines(lrest.size(), '9'), zeros(lrest.size(), '0');
    std::vector<std::string> alts;
    alts.push_back(literal(std::string(1, a)) + " " + same_length(lrest, nines));
    if (a + 1 <= b - 1)
        alts.push_back((a + 1 == b - 1
                            ? literal(std::string(1, a + 1))
                            : "[" + std::string(1, a + 1) + "-" + std::string(1, b - 1) + "]") +
                       " [0-9]{" + std::to_string(lrest.size()) + "}");
    alts.push_back(literal(std::string(1, b)) + " " + same_length(zeros, hrest));
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
}

// The decimal forms (no sign, no leading zeros) of the integers lo..hi, 0 <= lo <= hi.
std::string nonnegative_range(uint64_t lo, uint64_t hi) {
    std::vector<std::string> alts;
    std::string a = std::to_string(lo);
    const std::string b = std::to_string(hi);
    while (a.size() < b.size()) {  // lo up to the largest number of its length
        alts.push_back(same_length(a, std::string(a.size(), '9')));
        a = std::string(a.size() + 1, '0');  // 10...0, one digit longer
        a[0] = '1';
    }
    alts.push_back(same_length(a, b));
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
}

// Integers >= lo (lo > 0), up to 16 digits.
std::string at_least(uint64_t lo) {
    const std::string s = std::to_string(lo);
    if (s.size() >= 16) return nonnegative_range(lo, lo);
    return "(" + nonnegative_range(lo, std::stoull(std::string(s.size(), '9'))) + " | [1-9] " +
           repeat_digits(static_cast<int>(s.size()), 15) + ")";
}

// Integers in [lo, hi]; a side that is not given is open.
std::string integer_range(bool has_lo, int64_t lo, bool has_hi, int64_t hi) {
    const std::string any_pos = "([1-9] [0-9]{0,15})";
    std::vector<std::string> alts;
    // Negative numbers: "-" then their magnitude in [max(1, -hi), -lo].
    if (!has_lo || lo < 0) {
        const uint64_t mag_lo = has_hi && hi < 0 ? static_cast<uint64_t>(-(hi + 1)) + 1 : 1;
        if (has_lo)
            alts.push_back("\"-\" " +
                           nonnegative_range(mag_lo, static_cast<uint64_t>(-(lo + 1)) + 1));
        else
            alts.push_back("\"-\" " + (mag_lo == 1 ? any_pos : at_least(mag_lo)));
    }
    if (!has_hi || hi >= 0) {  // and the others, in [max(0, lo), hi]
        const uint64_t from = has_lo && lo > 0 ? static_cast<uint64_t>(lo) : 0;
        if (has_hi)
            alts.push_back(nonnegative_range(from, static_cast<uint64_t>(hi)));
        else
            alts.push_back(from == 0 ? "(\"0\" | " + any_pos + ")" : at_least(from));
    }
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
}

class Converter {
public:
    explicit Converter(const json& root) : root_(root) {}

    std::string convert() {
        const std::string top = visit(root_, "root", "#");
        std::string out = "root ::= " + top + "\n";
        for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
        out += "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";
        out +=
            "string-char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" "
            "[0-9a-fA-F]{4})\n";
        out +=
            "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\") "
            "ws\n";
        out +=
            "object ::= \"{\" ws ( string \":\" ws value ( \",\" ws string \":\" ws value )* "
            ")? \"}\" ws\n";
        out += "array ::= \"[\" ws ( value ( \",\" ws value )* )? \"]\" ws\n";
        out += "string ::= \"\\\"\" string-char* \"\\\"\" ws\n";
        out +=
            "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,15})? ([eE] [-+]? "
            "[0-9]{1,3})? ws\n";
        return out;
    }

private:
    [[noreturn]] void refuse(const std::string& path, const std::string& what) const {
        fail("json_schema: ", path, ": ", what);
    }

    // A rule for the schema at path, named from `hint`; returns the rule's name.
    std::string visit(const json& s, const std::string& hint, const std::string& path) {
        const std::string name = fresh(hint);
        rules_[name] = "";  // reserved (recursion through $ref may come back here)
        rules_[name] = body(s, name, path);
        return name;
    }

    std::string fresh(const std::string& hint) {
        std::string base;
        for (char c : hint)
            base += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '-';
        if (base.empty() || base == "root" || base == "value" || base == "object" ||
            base == "array" || base == "string" || base == "number" || base == "ws")
            base = "s-" + base;
        std::string name = base;
        for (int i = 2; rules_.count(name); ++i) name = base + "-" + std::to_string(i);
        return name;
    }

    std::string body(const json& s, const std::string& name, const std::string& path) {
        if (s.is_boolean()) {
            if (!s.get<bool>()) refuse(path, "the schema false accepts nothing");
            return "value";
        }
        if (!s.is_object()) refuse(path, "a schema must be an object or a boolean");
        if (s.contains("format") && !s.contains("type") && !s.contains("$ref") &&
            !s.contains("enum") && !s.contains("const"))
            refuse(path, "'format' needs \"type\": \"string\"");
        for (const char* k :
             {"allOf", "not", "if", "then", "else", "patternProperties", "dependentRequired",
              "dependentSchemas", "uniqueItems", "contains", "propertyNames", "multipleOf"})
            if (s.contains(k)) refuse(path, std::string("'") + k + "' is not supported");
        if (s.contains("$ref")) return ref(s["$ref"], path);
        if (s.contains("const")) return literal(s["const"].dump()) + " ws";
        if (s.contains("enum")) {
            const json& e = s["enum"];
            if (!e.is_array() || e.empty()) refuse(path + "/enum", "must be a non-empty array");
            std::string out = "(";
            for (size_t i = 0; i < e.size(); ++i) out += (i ? " | " : "") + literal(e[i].dump());
            return out + ") ws";
        }
        for (const char* k : {"anyOf", "oneOf"})
            if (s.contains(k)) {
                const json& alts = s[k];
                if (!alts.is_array() || alts.empty())
                    refuse(path + "/" + k, "must be a non-empty array");
                std::string out = "(";
                for (size_t i = 0; i < alts.size(); ++i)
                    out += (i ? " | " : "") + visit(alts[i], name + "-" + std::to_string(i),
                                                    path + "/" + k + "/" + std::to_string(i));
                return out + ")";
            }
        if (!s.contains("type")) {
            if (s.contains("properties")) return object(s, name, path);
            if (s.contains("items") || s.contains("prefixItems")) return array(s, name, path);
            return "value";
        }
        const json& t = s["type"];
        if (t.is_array()) {
            if (t.empty()) refuse(path + "/type", "an empty list of types");
            std::string out = "(";
            for (size_t i = 0; i < t.size(); ++i) {
                json one = s;
                one["type"] = t[i];
                out += (i ? " | " : "") + visit(one, name + "-" + t[i].get<std::string>(), path);
            }
            return out + ")";
        }
        if (!t.is_string()) refuse(path + "/type", "must be a string or a list of strings");
        const std::string type = t.get<std::string>();
        if (type == "object") return object(s, name, path);
        if (type == "array") return array(s, name, path);
        if (type == "string") return string(s, path);
        if (type == "integer") return integer(s, path);
        if (type == "number") return number(s, path);
        if (type == "boolean") return "(\"true\" | \"false\") ws";
        if (type == "null") return "\"null\" ws";
        refuse(path + "/type", "unknown type '" + type + "'");
    }

    std::string ref(const json& r, const std::string& path) {
        if (!r.is_string()) refuse(path + "/$ref", "must be a string");
        const std::string target = r.get<std::string>();
        if (auto it = refs_.find(target); it != refs_.end()) return it->second;
        std::string prefix;
        for (const char* p : {"#/$defs/", "#/definitions/"})
            if (target.rfind(p, 0) == 0) prefix = p;
        if (prefix.empty()) refuse(path + "/$ref", "only #/$defs/... and #/definitions/... refs");
        const std::string key = target.substr(prefix.size());
        const json& defs = root_[prefix == "#/$defs/" ? "$defs" : "definitions"];
        if (!defs.is_object() || !defs.contains(key))
            refuse(path + "/$ref", "'" + target + "' is not defined");
        const std::string name = fresh("def-" + key);
        refs_[target] = name;  // before its body: a definition may refer to itself
        rules_[name] = "";
        rules_[name] = body(defs[key], name, target);
        return name;
    }

    std::string object(const json& s, const std::string& name, const std::string& path) {
        const json empty = json::object();
        const json& props = s.contains("properties") ? s["properties"] : empty;
        if (!props.is_object()) refuse(path + "/properties", "must be an object");
        std::vector<std::string> required;
        if (s.contains("required")) {
            if (!s["required"].is_array()) refuse(path + "/required", "must be an array");
            for (const json& r : s["required"]) {
                if (!r.is_string() || !props.contains(r.get<std::string>()))
                    refuse(path + "/required", "names a property that is not in 'properties'");
                required.push_back(r.get<std::string>());
            }
        }
        // Each property as `"key": value`, in the schema's order; required ones always.
        std::vector<std::pair<std::string, bool>> items;  // (text, required)
        for (const auto& [key, sub] : props.items()) {
            const std::string v = visit(sub, name + "-" + key, path + "/properties/" + key);
            const bool req = std::find(required.begin(), required.end(), key) != required.end();
            items.emplace_back(literal(json(key).dump()) + " ws \":\" ws " + v, req);
        }
        // first_i: the members from item i on when none was written yet; rest_i: the same after
        // one was (a comma before each). An optional item may be left out.
        std::string first = "\"\"", rest = "\"\"";
        for (size_t i = items.size(); i-- > 0;) {
            const std::string with_first = items[i].first + " " + rest;
            const std::string with_rest = "\",\" ws " + items[i].first + " " + rest;
            const std::string r = fresh(name + "-rest"), f = fresh(name + "-first");
            rules_[r] = items[i].second ? with_rest : with_rest + " | " + rest;
            rules_[f] = items[i].second ? with_first : with_first + " | " + first;
            rest = r;
            first = f;
        }
        return "\"{\" ws " + first + " \"}\" ws";
    }

    std::string array(const json& s, const std::string& name, const std::string& path) {
        const int64_t min = s.value("minItems", int64_t{0});
        int64_t max = s.contains("maxItems") ? s["maxItems"].get<int64_t>() : -1;
        if (min < 0 || (max >= 0 && max < min) || min > 1000 || max > 1000)
            refuse(path, "minItems / maxItems out of range (0 to 1000, min <= max)");
        std::vector<std::string> prefix;
        std::string tail = "value";  // the schema of items after the prefix ("": none allowed)
        if (s.contains("prefixItems")) {
            const json& p = s["prefixItems"];
            if (!p.is_array()) refuse(path + "/prefixItems", "must be an array");
            for (size_t i = 0; i < p.size(); ++i)
                prefix.push_back(visit(p[i], name + "-" + std::to_string(i),
                                       path + "/prefixItems/" + std::to_string(i)));
        }
        if (s.contains("items")) {
            if (s["items"].is_boolean() && !s["items"].get<bool>())
                tail.clear();
            else
                tail = visit(s["items"], name + "-item", path + "/items");
        }
        const auto k_prefix = static_cast<int64_t>(prefix.size());
        if (tail.empty()) max = max < 0 ? k_prefix : std::min(max, k_prefix);
        if (max >= 0 && max < min) refuse(path, "minItems exceeds the items allowed");
        const auto elem = [&](int64_t i) {
            return i < k_prefix ? prefix[static_cast<size_t>(i)] : tail;
        };
        // after_k: what may follow k written elements, built from the last position back.
        std::string after = "\"\"";
        const int64_t last = max >= 0 ? max : std::max<int64_t>({min, k_prefix, 1});
        if (max < 0) {  // past the prefix and the minimum: any number of tail items
            after = fresh(name + "-tail");
            rules_[after] = "( \",\" ws " + tail + " )*";
        }
        for (int64_t k = last - 1; k >= 1; --k) {
            const std::string next = "\",\" ws " + elem(k) + " " + after;
            const std::string r = fresh(name + "-after");
            rules_[r] = k < min ? next : "( " + next + " )?";
            after = r;
        }
        if (last == 0) return "\"[\" ws \"]\" ws";
        const std::string items = elem(0) + " " + after;
        return "\"[\" ws " + (min == 0 ? "( " + items + " )?" : items) + " \"]\" ws";
    }

    // A string format as a regex (RFC 3339 dates and times; days past the 28th of February
    // left out, so every date exists), or refused naming the ones known.
    std::string format_regex(const std::string& f, const std::string& path) {
        const std::string day31 = "(0[1-9]|[12][0-9]|3[01])", day30 = "(0[1-9]|[12][0-9]|30)";
        const std::string date = "[1-9][0-9]{3}-((0[13578]|1[02])-" + day31 + "|(0[469]|11)-" +
                                 day30 + "|02-(0[1-9]|1[0-9]|2[0-8]))";
        const std::string time =
            "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-"
            "5][0-9])";
        const std::string octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
        if (f == "date") return date;
        if (f == "time") return time;
        if (f == "date-time") return date + "T" + time;
        if (f == "uuid")
            return "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
        if (f == "ipv4") return "(" + octet + "\\.){3}" + octet;
        if (f == "email")
            return "[a-zA-Z0-9._%+-]{1,64}@[a-zA-Z0-9-]{1,63}(\\.[a-zA-Z0-9-]{1,63}){0,4}\\.[a-zA-"
                   "Z]{2,6}";
        refuse(path + "/format",
               "'" + f + "' is not supported (date, time, date-time, uuid, ipv4, email)");
    }

    std::string string(const json& s, const std::string& path) {
        if (s.contains("format")) {
            if (!s["format"].is_string()) refuse(path + "/format", "must be a string");
            if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength"))
                refuse(path,
                       "'format' together with pattern / minLength / maxLength is not supported");
            return "\"\\\"\" " + regex_to_gbnf(format_regex(s["format"], path), true) +
                   " \"\\\"\" ws";
        }
        if (s.contains("pattern")) {
            if (!s["pattern"].is_string()) refuse(path + "/pattern", "must be a string");
            if (s.contains("minLength") || s.contains("maxLength"))
                refuse(path, "'pattern' together with minLength / maxLength is not supported");
            try {
                return "\"\\\"\" " + regex_to_gbnf(s["pattern"].get<std::string>(), true) +
                       " \"\\\"\" ws";
            } catch (const Error& e) {
                refuse(path + "/pattern", e.what());
            }
        }
        const int64_t min = s.value("minLength", int64_t{0});
        const int64_t max = s.contains("maxLength") ? s["maxLength"].get<int64_t>() : -1;
        if (min < 0 || (max >= 0 && max < min) || min > 10000 || max > 10000)
            refuse(path, "minLength / maxLength out of range (0 to 10000, min <= max)");
        return "\"\\\"\" string-char{" + std::to_string(min) + "," +
               (max >= 0 ? std::to_string(max) : "") + "} \"\\\"\" ws";
    }

    // The schema's bounds on an integer: [lo, hi], each present or not.
    void int_bounds(const json& s, const std::string& path, bool& has_lo, int64_t& lo, bool& has_hi,
                    int64_t& hi) {
        has_lo = has_hi = false;
        const auto take = [&](const char* k, bool low, bool exclusive) {
            if (!s.contains(k)) return;
            if (!s[k].is_number()) refuse(path + "/" + k, "must be a number");
            const double v = s[k].get<double>();
            if (std::fabs(v) > 1e15) refuse(path + "/" + k, "beyond 1e15");
            int64_t b =
                low ? static_cast<int64_t>(std::ceil(v)) : static_cast<int64_t>(std::floor(v));
            if (exclusive && static_cast<double>(b) == v) b += low ? 1 : -1;
            if (low) {
                lo = has_lo ? std::max(lo, b) : b;
                has_lo = true;
            } else {
                hi = has_hi ? std::min(hi, b) : b;
                has_hi = true;
            }
        };
        take("minimum", true, false);
        take("exclusiveMinimum", true, true);
        take("maximum", false, false);
        take("exclusiveMaximum", false, true);
        if (has_lo && has_hi && lo > hi) refuse(path, "no integer lies within the bounds");
    }

    std::string integer(const json& s, const std::string& path) {
        bool has_lo, has_hi;
        int64_t lo = 0, hi = 0;
        int_bounds(s, path, has_lo, lo, has_hi, hi);
        return integer_range(has_lo, lo, has_hi, hi) + " ws";
    }

    std::string number(const json& s, const std::string& path) {
        if (!s.contains("minimum") && !s.contains("maximum") && !s.contains("exclusiveMinimum") &&
            !s.contains("exclusiveMaximum"))
            return "number";
        bool has_lo, has_hi;
        int64_t lo = 0, hi = 0;
        int_bounds(s, path, has_lo, lo, has_hi, hi);
        // The integers in range, and x.f for integers x >= max(lo, 0) with x + 1 <= hi: such a
        // number lies strictly between x and x + 1, so within the bounds, exclusive or not.
        std::string out = "(" + integer_range(has_lo, lo, has_hi, hi);
        const int64_t flo = std::max<int64_t>(has_lo ? lo : 0, 0);
        if (!has_hi || hi - 1 >= flo)
            out += " | " + integer_range(true, flo, has_hi, has_hi ? hi - 1 : 0) +
                   " \".\" [0-9]{1,15}";
        return out + ") ws";
    }

    const json& root_;
    std::map<std::string, std::string> rules_;
    std::map<std::string, std::string> refs_;
};

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
    return Converter(schema).convert();
}

}  // namespace syslm::grammar
