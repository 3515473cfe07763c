#include "curate/clean.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <unordered_map>

#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "curate/clean_report.hpp"
#include "curate/normalize.hpp"
#include "curate/substring_dedup.hpp"
#include "tokenizer/utf8.hpp"

namespace syslm::curate {

namespace fs = std::filesystem;

namespace {

struct PairHash {
    size_t operator()(const std::pair<uint64_t, uint64_t>& p) const { return p.first ^ p.second; }
};

enum class Step : uint8_t { Kept, Exact, Near, Filtered };

// Pass 1: each document's cluster (its own id when kept) and the step that removed it: exact
// duplicates name the first document with their text, near duplicates their MinHash cluster's
// first document.
struct Decisions {
    std::vector<int64_t> cluster;
    std::vector<Step> step;
    std::map<int64_t, std::string> reason;  // the report's examples: id -> why it was removed
};

constexpr size_t kExamples = 5;  // per reason, in the report

// The first kExamples documents removed for each reason (filtered ones are added as they come).
void pick_examples(Decisions& d) {
    std::map<std::string, size_t> count;
    for (const auto& [id, why] : d.reason) ++count[why];
    for (size_t id = 0; id < d.step.size(); ++id) {
        const char* why = d.step[id] == Step::Exact  ? "exact"
                          : d.step[id] == Step::Near ? "near"
                                                     : nullptr;
        if (why && count[why]++ < kExamples) d.reason[static_cast<int64_t>(id)] = why;
    }
}

// The first 600 bytes of a document for the report, as valid UTF-8 (the page must be): cut at
// a character boundary, invalid bytes (binary input) shown as U+FFFD.
std::string report_snippet(const std::string& text) {
    std::string out;
    for (size_t pos = 0; pos < text.size() && pos < 600;) {
        uint32_t cp = 0;
        const size_t n = tokenizer::utf8_decode(text, pos, cp);
        if (n > 0 && pos + n > 600) break;
        if (n == 0) {
            tokenizer::append_utf8(out, 0xFFFD);
            ++pos;
        } else {
            out.append(text, pos, n);
            pos += n;
        }
    }
    return out;
}

// The first quality rule a document fails, if any: the heuristics, the language, the quality
// classifier, the perplexity.
std::optional<std::string> quality_rule(const CleanOptions& o, const std::string& text,
                                        double ppl) {
    if (o.filters)
        if (std::optional<std::string> rule = o.filters->reject(text)) return rule;
    if (o.langid) {
        const NgramClassifier::Guess g = o.langid->predict(text);
        if (g.label != o.lang || g.prob < o.min_lang_prob) return "lang";
    }
    if (o.quality && o.quality->prob(text, "good") < o.min_quality) return "quality";
    if (o.scores && ppl > o.max_ppl) return "perplexity";
    return std::nullopt;
}

Decisions decide(const CleanOptions& o, const std::vector<std::string>& files, CleanReport& r) {
    Decisions d;
    ThreadPool pool(o.threads);
    const MinHasher hasher(o.minhash);
    NearDuplicates near(o.minhash);
    std::unordered_map<std::pair<uint64_t, uint64_t>, int64_t, PairHash> exact;
    DocumentReader reader(files, o.unit);
    constexpr size_t kBatch = 2048;
    std::vector<Document> batch(kBatch);
    std::vector<std::string> norm(kBatch);
    std::vector<uint32_t> sigs(kBatch * static_cast<size_t>(o.minhash.perm));
    std::vector<std::optional<std::string>> rule(kBatch);
    std::vector<int64_t> near_doc;  // the MinHash index's documents (filtered ones are not in it)
    std::vector<size_t> per_file(files.size(), 0);
    std::vector<double> ppl(kBatch, 0.0);
    for (;;) {
        size_t n = 0;
        while (n < kBatch && reader.next(batch[n])) {
            const auto f = static_cast<size_t>(batch[n].file);
            if (o.scores) r.ppl.push_back(ppl[n] = o.scores->ppl(files[f], per_file[f]));
            ++per_file[f];
            ++n;
        }
        if (n == 0) break;
        pool.parallel_for(static_cast<int64_t>(n), [&](int64_t b, int64_t e, int) {
            for (int64_t i = b; i < e; ++i) {
                rule[i] = quality_rule(o, batch[i].text, ppl[i]);
                if (rule[i]) continue;
                norm[i] = normalize_text(batch[i].text);
                if (o.near) hasher.signature(norm[i], sigs.data() + i * o.minhash.perm);
            }
        });
        for (size_t i = 0; i < n; ++i) {  // in document order
            const int64_t id = batch[i].id;
            r.bytes_in += static_cast<int64_t>(batch[i].text.size());
            int64_t cluster = id;
            Step step = Step::Kept;
            if (rule[i]) {  // in no index: it cannot name a cluster
                if (r.filtered[*rule[i]]++ < static_cast<int64_t>(kExamples))
                    d.reason[id] = *rule[i];
                d.cluster.push_back(id);
                d.step.push_back(Step::Filtered);
                continue;
            }
            if (o.exact) {
                const auto key = std::pair{hash_bytes(norm[i], 11), hash_bytes(norm[i], 12)};
                const auto [it, added] = exact.emplace(key, id);
                if (!added) {
                    cluster = it->second;
                    step = Step::Exact;
                }
            }
            // every document joins the index: a later copy may be near it alone
            if (o.near) {
                near.add(sigs.data() + i * o.minhash.perm);
                near_doc.push_back(id);
            }
            d.cluster.push_back(cluster);
            d.step.push_back(step);
        }
    }
    r.skipped = reader.skipped().summary();
    if (o.scores)
        for (size_t f = 0; f < files.size(); ++f) o.scores->check_count(files[f], per_file[f]);
    // Clusters are the final connected components (a later document may join two earlier
    // clusters), each kept as its first document.
    for (size_t k = 0; k < near_doc.size(); ++k) {
        const auto id = static_cast<size_t>(near_doc[k]);
        const int64_t c = near_doc[static_cast<size_t>(near.cluster_of(static_cast<int64_t>(k)))];
        if (d.step[id] == Step::Kept && c != static_cast<int64_t>(id)) d.step[id] = Step::Near;
        if (d.step[id] != Step::Exact) d.cluster[id] = c;
    }
    r.candidate_pairs = near.candidate_pairs();
    std::map<int64_t, int64_t> sizes;
    for (size_t id = 0; id < d.step.size(); ++id)
        if (d.step[id] == Step::Near || (d.step[id] == Step::Kept && o.near))
            ++sizes[d.cluster[id]];
    for (const auto& [root, n] : sizes)
        if (n > 1) r.largest_clusters.push_back(n);
    std::sort(r.largest_clusters.rbegin(), r.largest_clusters.rend());
    if (r.largest_clusters.size() > 20) r.largest_clusters.resize(20);
    pick_examples(d);
    return d;
}

// Substring dedup over the documents the steps above kept (a pass of its own); null when off.
std::unique_ptr<SubstringDedup> repeated_spans(const CleanOptions& o,
                                               const std::vector<std::string>& files,
                                               const Decisions& d) {
    if (o.substring_words <= 0) return nullptr;
    auto spans = std::make_unique<SubstringDedup>(o.substring_words);
    DocumentReader reader(files, o.unit);
    Document doc;
    while (reader.next(doc))
        if (d.step[static_cast<size_t>(doc.id)] == Step::Kept) spans->add(doc.id, doc.text);
    spans->run();
    return spans;
}

// The output directory's file for `input`, truncated.
void open_output(const CleanOptions& o, const std::string& input, std::ofstream& out) {
    const fs::path path = fs::path(o.out_dir) / fs::path(input).filename();
    out.close();
    out.open(path, std::ios::binary | std::ios::trunc);
    SYSLM_CHECK(out, path.string(), ": cannot write");
}

// Pass 2 (or 3): the kept documents, each input file's into out_dir/<its name>, with the
// clusters file and the report's examples.
void write_kept(const CleanOptions& o, const std::vector<std::string>& files, const Decisions& d,
                const SubstringDedup* spans, CleanReport& r) {
    fs::create_directories(o.out_dir);
    std::ofstream clusters;
    if (!o.clusters.empty()) {
        clusters.open(o.clusters);
        SYSLM_CHECK(clusters, o.clusters, ": cannot write");
    }
    std::map<int64_t, std::string> snippet;  // the examples and the documents they duplicate
    for (const auto& [id, why] : d.reason) {
        snippet[id];
        if (d.cluster[static_cast<size_t>(id)] != id) snippet[d.cluster[static_cast<size_t>(id)]];
    }
    DocumentReader reader(files, o.unit);
    Document doc;
    int open_file = -1;
    std::ofstream out;
    const char* step_names[] = {"kept", "exact", "near", "filtered"};
    const char* separator = o.unit == DocUnit::Blank     ? "\n\n"
                            : o.unit == DocUnit::Percent ? "\n%\n"
                                                         : "\n";
    while (reader.next(doc)) {
        if (const auto it = snippet.find(doc.id); it != snippet.end())
            it->second = report_snippet(doc.text);
        const Step step = d.step[static_cast<size_t>(doc.id)];
        if (clusters.is_open())
            clusters << "{\"id\":" << doc.id << ",\"file\":" << doc.file
                     << ",\"cluster\":" << d.cluster[static_cast<size_t>(doc.id)] << ",\"step\":\""
                     << step_names[static_cast<int>(step)] << "\"}\n";
        r.exact_duplicates += step == Step::Exact;
        r.near_duplicates += step == Step::Near;
        if (step != Step::Kept) continue;
        if (spans) doc.text = spans->apply(doc.id, doc.text);
        if (spans && doc.text.find_first_not_of(" \t\n\r") == std::string::npos) {
            ++r.emptied;
            continue;
        }
        if (doc.file != open_file) open_output(o, files[static_cast<size_t>(doc.file)], out);
        open_file = doc.file;
        out << doc.text << separator;
        ++r.kept;
        r.bytes_out += static_cast<int64_t>(doc.text.size());
    }
    out.close();
    SYSLM_CHECK(!out.bad(), o.out_dir, ": write failed");
    SYSLM_CHECK(!clusters.is_open() || clusters.good(), o.clusters, ": write failed");
    for (const auto& [id, why] : d.reason) {
        const int64_t c = d.cluster[static_cast<size_t>(id)];
        r.examples[why].push_back({id, snippet[id], c != id ? snippet[c] : std::string()});
    }
}

}  // namespace

CleanReport clean(const CleanOptions& o) {
    const auto t0 = std::chrono::steady_clock::now();
    CleanReport r;
    const std::vector<std::string> files = input_files(o.inputs);
    std::unordered_map<std::string, std::string> names;  // output name -> the input that has it
    for (const std::string& f : files) {
        const auto [it, added] = names.emplace(fs::path(f).filename().string(), f);
        SYSLM_CHECK(added, "data clean: ", it->second, " and ", f,
                    " have the same file name, which the output directory would hold twice");
    }
    const Decisions d = decide(o, files, r);
    r.documents = static_cast<int64_t>(d.cluster.size());
    const std::unique_ptr<SubstringDedup> spans = repeated_spans(o, files, d);
    if (spans) r.substring_words = spans->removed_words();
    write_kept(o, files, d, spans.get(), r);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!o.report.empty()) write_report(o, r);
    return r;
}

}  // namespace syslm::curate
