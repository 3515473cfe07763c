// Plans round-trip through JSON and build exactly the file they describe (a listed tensor's name
// matches itself only: blk.1 is not blk.11); the measurement cache keeps what was written and
// skips a torn last line; the front keeps exactly the points nothing beats on both axes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../common/random_model.hpp"
#include "compress/quantize_model.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"
#include "tune/measurements.hpp"
#include "tune/plan.hpp"

namespace syslm::tune {
namespace {

TEST(Plan, RoundTripsThroughJsonAndRefusesWhatIsNotAPlan) {
    Plan p;
    p.recipe = "Q4_K_M";
    p.imatrix = true;
    p.tensor_types = {{"blk.0.attn_v.weight", DType::Q8_0}, {"output.weight", DType::Q6_K}};
    p.threads = 2;
    p.batch = 256;
    const Plan q = Plan::from_json(nlohmann::json::parse(p.to_json().dump()));
    EXPECT_EQ(q.key(), p.key());
    EXPECT_EQ(q.tensor_types, p.tensor_types);
    const std::string path = std::string(SYSLM_TEST_TMP) + "/plan.json";
    std::filesystem::create_directories(SYSLM_TEST_TMP);
    save_plan(p, path);
    EXPECT_EQ(load_plan(path).key(), p.key());
    nlohmann::json bad = p.to_json();
    bad["model"]["tensor_types"]["output.weight"] = "Q4_K_M";  // a recipe, not a type
    EXPECT_THROW(Plan::from_json(bad), Error);
    bad = p.to_json();
    bad["syslm_plan"] = 7;
    EXPECT_THROW(Plan::from_json(bad), Error);
    bad = p.to_json();
    bad["runtime"]["threads"] = -1;
    EXPECT_THROW(Plan::from_json(bad), Error);
    // The length knobs: "auto" round-trips, anything else is refused.
    p.window = "auto";
    p.expert_top_p = "auto";
    const Plan a = Plan::from_json(nlohmann::json::parse(p.to_json().dump()));
    EXPECT_EQ(a.window, "auto");
    EXPECT_EQ(a.expert_top_p, "auto");
    EXPECT_EQ(a.key(), p.key());
    bad = p.to_json();
    bad["runtime"]["window"] = "64";
    EXPECT_THROW(Plan::from_json(bad), Error);
    std::ofstream(path) << "{ not json";
    EXPECT_THROW(load_plan(path), Error);
}

TEST(Plan, CarriesServeAndTrainSettingsAndRefusesMisspeltOnes) {
    Plan p;
    p.recipe = "Q4_0";
    ServeSettings s;
    s.parallel = 7;
    s.token_budget = 300;
    s.page_size = 32;
    s.kv_pages = 90;
    s.ctx = 333;
    s.cache_type = "f32";
    p.serve = s;
    TrainSettings t;
    t.micro_batch = 3;
    t.accum = 5;
    t.recompute = "full";
    t.precision = "bf16";
    p.train = t;
    const Plan q = Plan::from_json(nlohmann::json::parse(p.to_json().dump()));
    ASSERT_TRUE(q.serve && q.train);
    EXPECT_EQ(*q.serve, s);
    EXPECT_EQ(*q.train, t);
    EXPECT_EQ(q.key(), p.key());
    Plan recipe_only;
    recipe_only.recipe = "Q4_0";
    EXPECT_EQ(q.model_key(), recipe_only.model_key());  // the file does not change
    EXPECT_FALSE(Plan::from_json(Plan{}.to_json()).serve);
    for (const char* edit : {R"({"serve": {"paralel": 4}})", R"({"serve": {"parallel": 0}})",
                             R"({"serve": {"cache_type": "q8"}})", R"({"train": {"accum": 0}})",
                             R"({"train": {"precision": "fp8"}})", R"({"runtime": {"thread": 2}})",
                             R"({"extra": 1})", R"({"serve": {"parallel": "4"}})"}) {
        nlohmann::json bad = p.to_json();
        bad.merge_patch(nlohmann::json::parse(edit));
        EXPECT_THROW(Plan::from_json(bad), Error) << edit;
    }
}

TEST(Plan, CarriesTheDraftOutsideTheModelHalf) {
    Plan p;
    p.recipe = "Q4_0";
    DraftSettings d;
    d.file = "small draft.gguf";
    d.k = 3;
    d.adaptive = false;
    d.k_min = 2;
    d.k_max = 9;
    p.draft = d;
    const Plan q = Plan::from_json(nlohmann::json::parse(p.to_json().dump()));
    ASSERT_TRUE(q.draft);
    EXPECT_EQ(*q.draft, d);
    EXPECT_EQ(q.key(), p.key());
    Plan recipe_only;
    recipe_only.recipe = "Q4_0";
    EXPECT_EQ(q.model_key(), recipe_only.model_key());  // the file does not change
    EXPECT_NE(q.key(), recipe_only.key());
    EXPECT_FALSE(Plan::from_json(recipe_only.to_json()).draft);
    EXPECT_EQ(d.label(), "k = 3");
    d.adaptive = true;
    EXPECT_EQ(d.label(), "adaptive k (from 3, 2-9)");
    for (const char* edit :
         {R"({"draft": {"k": 0}})", R"({"draft": {"k_max": 1}})", R"({"draft": {"file": ""}})",
          R"({"draft": {"length": 4}})", R"({"draft": {"adaptive": "yes"}})"}) {
        nlohmann::json bad = p.to_json();
        bad.merge_patch(nlohmann::json::parse(edit));
        EXPECT_THROW(Plan::from_json(bad), Error) << edit;
    }
}

TEST(Plan, CarriesTheStructureInTheModelHalf) {
    Plan p;
    p.recipe = "Q8_0";
    PruneSettings s;
    s.ffn = 0.25;
    s.heads = 0.125;
    s.layers = 1;
    s.recover_steps = 150;
    s.recover_lr = 2e-4;
    s.n_layer = 3;
    s.n_head = 7;
    s.n_ff = 48;
    p.prune = s;
    const Plan q = Plan::from_json(nlohmann::json::parse(p.to_json().dump()));
    ASSERT_TRUE(q.prune);
    EXPECT_EQ(*q.prune, s);
    Plan unpruned;
    unpruned.recipe = "Q8_0";
    EXPECT_NE(q.model_key(), unpruned.model_key());  // a different file
    EXPECT_FALSE(Plan::from_json(unpruned.to_json()).prune);
    for (const char* edit :
         {R"({"model": {"prune": {"fnn": 0.2}}})", R"({"model": {"prune": {"ffn": 1.5}}})",
          R"({"model": {"prune": {"recover_steps": -1}}})",
          R"({"model": {"prune": {"n_ff": 0}}})"}) {
        nlohmann::json bad = p.to_json();
        bad.merge_patch(nlohmann::json::parse(edit));
        EXPECT_THROW(Plan::from_json(bad), Error) << edit;
    }
}

TEST(Plan, BuildsExactlyTheListedTypes) {
    model::InitConfig c = testing::small_model_config("llama", 32, 81);
    c.n_layer = 12;
    c.n_embd = 64;
    c.n_head = 4;
    c.n_ff = 96;
    const std::string in = testing::write_test_model("plan_in", c);
    Plan p;
    p.tensor_types = {{"blk.1.attn_q.weight", DType::Q4_0}, {"output.weight", DType::Q8_0}};
    const std::string out = std::string(SYSLM_TEST_TMP) + "/plan_out.gguf";
    compress::quantize_model(in, out, quantize_options(p, DType::F32));
    const io::GGUFFile f(out);
    for (const io::GGUFTensor& t : f.tensors()) {
        const auto it = p.tensor_types.find(t.name);
        EXPECT_EQ(t.type, it == p.tensor_types.end() ? DType::F32 : it->second) << t.name;
    }
}

Point point(const std::string& label, double kl, double decode, uint64_t bytes) {
    Point p;
    p.label = label;
    p.plan.recipe = "Q8_0";
    p.plan.batch = static_cast<int>(bytes % 1000) + 1;  // distinct keys
    p.kl = kl;
    p.decode_ts = decode;
    p.file_bytes = bytes;
    return p;
}

TEST(Front, KeepsWhatNothingBeatsOnBothAxes) {
    const std::vector<Point> pts = {point("a", 0.001, 100, 900), point("b", 0.002, 150, 800),
                                    point("c", 0.003, 140, 700),  // beaten by b
                                    point("d", 0.010, 200, 600), point("e", 0.010, 190, 500)};
    std::vector<std::string> labels;
    for (const Point& p : pareto_front(pts, Goal::Decode)) labels.push_back(p.label);
    EXPECT_EQ(labels, (std::vector<std::string>{"a", "b", "d"}));
    labels.clear();
    for (const Point& p : pareto_front(pts, Goal::Size)) labels.push_back(p.label);
    EXPECT_EQ(labels, (std::vector<std::string>{"a", "b", "c", "e"}));  // d: e is smaller
}

TEST(MeasurementCache, KeepsPointsAndSkipsATornLine) {
    const std::string path = std::string(SYSLM_TEST_TMP) + "/measurements.jsonl";
    std::filesystem::create_directories(SYSLM_TEST_TMP);
    std::filesystem::remove(path);
    {
        MeasurementCache c(path);
        c.add(point("a", 0.001, 100, 900));
        c.add(point("b", 0.002, 150, 800));
    }
    std::ofstream(path, std::ios::app) << "{\"label\": \"torn";  // a kill mid-write
    MeasurementCache c(path);
    ASSERT_EQ(c.points().size(), 2u);
    EXPECT_TRUE(c.find(point("b", 0, 0, 800).plan.key()));
    EXPECT_FALSE(c.find(point("z", 0, 0, 1).plan.key()));
    EXPECT_EQ(c.points()[1].decode_ts, 150);
}

}  // namespace
}  // namespace syslm::tune
