// The demo report's check verdict in its JSON and in the exit code: a run that
// skipped the check must not report a failed one (it used to say "passed": false),
// and a failed check must fail the process.
#include "demo_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

namespace ringkv::model::test {
namespace {

using nlohmann::json;

DemoReport Checked(double max_abs_diff) {
  DemoReport r;
  r.check.ran = true;
  r.check.positions = 10;
  r.check.sequence = 12;
  r.check.max_abs_diff = max_abs_diff;
  r.check.recompute_seconds = 0.25;
  return r;
}

TEST(DemoReport, SkippedCheckIsNeitherPassedNorFailed) {
  const DemoReport r;  // the check did not run
  EXPECT_EQ(r.Verdict(), CheckVerdict::kSkipped);
  EXPECT_EQ(ExitCode(r), 0);
  const json report = json::parse(ToJson(r));
  const json& check = report.at("check");
  EXPECT_EQ(check.at("status"), "skipped");
  EXPECT_TRUE(check.at("passed").is_null());
  for (const char* measured :
       {"positions", "sequence", "max_abs_logit_diff", "recompute_seconds"}) {
    EXPECT_FALSE(check.contains(measured)) << measured;
  }
  EXPECT_NE(ToText(r).find("skipped"), std::string::npos);
}

TEST(DemoReport, PassedCheck) {
  const DemoReport r = Checked(kLogitTolerance);  // at the tolerance still passes
  EXPECT_EQ(r.Verdict(), CheckVerdict::kPassed);
  EXPECT_EQ(ExitCode(r), 0);
  const json check = json::parse(ToJson(r)).at("check");
  EXPECT_EQ(check.at("status"), "passed");
  EXPECT_EQ(check.at("passed"), true);
  EXPECT_EQ(check.at("positions"), 10);
  EXPECT_EQ(check.at("sequence"), 12);
  EXPECT_EQ(check.at("max_abs_logit_diff").get<double>(), kLogitTolerance);
  EXPECT_EQ(check.at("tolerance").get<double>(), kLogitTolerance);
  EXPECT_EQ(check.at("recompute_seconds").get<double>(), 0.25);
}

TEST(DemoReport, FailedCheckFailsTheProcess) {
  const DemoReport r = Checked(2 * kLogitTolerance);
  EXPECT_EQ(r.Verdict(), CheckVerdict::kFailed);
  EXPECT_EQ(ExitCode(r), 1);
  const json check = json::parse(ToJson(r)).at("check");
  EXPECT_EQ(check.at("status"), "failed");
  EXPECT_EQ(check.at("passed"), false);
  EXPECT_EQ(check.at("max_abs_logit_diff").get<double>(), 2 * kLogitTolerance);
  EXPECT_NE(ToText(r).find("FAILED"), std::string::npos);
}

// The serving scene's per-conversation check counts in the verdict: one
// conversation over the tolerance (or NaN) fails the run even when the main
// check passed; its figures reach the JSON.
TEST(DemoReport, ServingCheckCountsInTheVerdict) {
  DemoReport r = Checked(1e-5);
  r.serving.conversations = 3;
  r.serving.system_tokens = 16;
  r.serving.user_tokens = 4;
  r.serving.steps = 5;
  r.serving.used_bytes = 1000;
  r.serving.separate_bytes = 2500;
  r.serving.positions = 18;
  r.serving.max_abs_diff = {1e-5, 2e-5, 3e-5};
  EXPECT_EQ(r.Verdict(), CheckVerdict::kPassed);
  json serving = json::parse(ToJson(r)).at("serving");
  EXPECT_EQ(serving.at("conversations"), 3);
  EXPECT_EQ(serving.at("pool_bytes").at("saved"), 1500);
  EXPECT_EQ(serving.at("check").at("passed"), true);
  EXPECT_EQ(serving.at("check").at("max_abs_logit_diff").get<double>(), 3e-5);
  EXPECT_EQ(serving.at("check").at("per_conversation").size(), 3u);

  r.serving.max_abs_diff[1] = 2 * kLogitTolerance;
  EXPECT_EQ(r.Verdict(), CheckVerdict::kFailed);
  EXPECT_EQ(ExitCode(r), 1);
  serving = json::parse(ToJson(r)).at("serving");
  EXPECT_EQ(serving.at("check").at("passed"), false);
  EXPECT_EQ(json::parse(ToJson(r)).at("check").at("status"), "failed");

  r.serving.max_abs_diff[1] = std::nan("");
  EXPECT_EQ(r.Verdict(), CheckVerdict::kFailed);

  r.serving = ServingReport{};  // the scene did not run
  EXPECT_EQ(r.Verdict(), CheckVerdict::kPassed);
  EXPECT_TRUE(json::parse(ToJson(r)).at("serving").is_null());
}

// Values reach the JSON unrounded and typed: counts as integers, times as numbers.
TEST(DemoReport, JsonCarriesTheValues) {
  DemoReport r = Checked(1.5e-5);
  r.isa = "avx2";
  r.threads = 3;
  r.turn1_prefill.tokens = 7;
  r.turn1_prefill.total_seconds = 0.5;
  r.turn1_prefill.sdpa_seconds = 0.125;
  r.turn1_prefill.cache_seconds = 0.0625;
  r.snapshot_bytes = 123456789;
  r.snapshot_seconds = 1.25e-7;
  r.speculation.drafted = 6;
  r.speculation.accepted = 4;
  r.final_offset = 300;
  r.long_offset_start = 44;
  const json j = json::parse(ToJson(r));
  EXPECT_EQ(j.at("isa"), "avx2");
  EXPECT_EQ(j.at("threads"), 3);
  EXPECT_EQ(j.at("config").at("layers"), r.config.layers);
  EXPECT_EQ(j.at("config").at("kv_dtype"), "f16");
  EXPECT_EQ(j.at("config").at("params"), r.config.ParameterCount());
  const json& prefill = j.at("turn1").at("prefill");
  EXPECT_TRUE(prefill.at("tokens").is_number_integer());
  EXPECT_EQ(prefill.at("tokens"), 7);
  EXPECT_EQ(prefill.at("seconds").get<double>(), 0.5);
  EXPECT_EQ(prefill.at("tokens_per_s").get<double>(), 14.0);
  EXPECT_EQ(prefill.at("sdpa_seconds").get<double>(), 0.125);
  EXPECT_EQ(prefill.at("cache_seconds").get<double>(), 0.0625);
  EXPECT_EQ(prefill.at("other_seconds").get<double>(), 0.3125);
  EXPECT_EQ(j.at("turn1").at("snapshot_bytes"), 123456789);
  EXPECT_EQ(j.at("turn1").at("snapshot_seconds").get<double>(), 1.25e-7);
  EXPECT_EQ(j.at("speculation").at("drafted"), 6);
  EXPECT_EQ(j.at("speculation").at("accepted"), 4);
  EXPECT_EQ(j.at("long").at("offset_start"), 44);
  EXPECT_EQ(j.at("long").at("offset_end"), 300);
  EXPECT_EQ(j.at("long").at("wraps"), (300 - 44) / r.config.window);
  EXPECT_EQ(j.at("check").at("max_abs_logit_diff").get<double>(), 1.5e-5);
}

// The K/V dtype's bytes (RowBytes, scales included) and its cost against the
// unrounded f32 recompute reach both renderings; the serving pools' f16 stand-in
// for a quantized dtype is stated.
TEST(DemoReport, QuantizedKvBytesCostAndPools) {
  DemoReport r = Checked(2e-4);
  r.config.kv_heads = 2;
  r.config.head_dim = 64;
  r.config.kv_dtype = DType::kI8;
  EXPECT_EQ(r.BytesPerToken(), 2u * 2 * (64 + 4));  // K and V rows of 64 int8 + a scale
  json j = json::parse(ToJson(r));
  EXPECT_EQ(j.at("cache_bytes").at("kv_dtype"), "int8");
  EXPECT_EQ(j.at("cache_bytes").at("key_row_bytes"), 68);
  EXPECT_EQ(j.at("cache_bytes").at("value_row_bytes"), 68);
  EXPECT_EQ(j.at("cache_bytes").at("bytes_per_token_per_layer"), 272);
  EXPECT_TRUE(j.at("kv_cost").is_null());  // not measured
  EXPECT_NE(ToText(r).find("not measured"), std::string::npos);

  r.kv_cost.ran = true;
  r.kv_cost.positions = 40;
  r.kv_cost.max_abs_diff = 0.125;
  r.kv_cost.mean_abs_diff = 0.015625;
  r.kv_cost.greedy_differs = 3;
  r.kv_cost.recompute_seconds = 0.5;
  r.serving.conversations = 2;
  r.serving.pool_dtype = DType::kF16;
  j = json::parse(ToJson(r));
  const json& cost = j.at("kv_cost");
  EXPECT_EQ(cost.at("kv_dtype"), "int8");
  EXPECT_EQ(cost.at("positions"), 40);
  EXPECT_EQ(cost.at("max_abs_logit_diff").get<double>(), 0.125);
  EXPECT_EQ(cost.at("mean_abs_logit_diff").get<double>(), 0.015625);
  EXPECT_EQ(cost.at("greedy_token_differs"), 3);
  EXPECT_EQ(cost.at("greedy_token_differs_fraction").get<double>(), 3.0 / 40);
  EXPECT_EQ(j.at("serving").at("pool_dtype"), "f16");
  EXPECT_TRUE(j.at("serving").at("pool_dtype_reason").is_string());
  const std::string text = ToText(r);
  for (const char* piece : {"K/V int8: a row of 64 values takes 68 B", "(0.53x f16)",
                            "greedy token differs in 3 rows (7.50 %)", "max |diff| 1.25e-01",
                            "pools store K/V as f16"}) {
    EXPECT_NE(text.find(piece), std::string::npos) << piece << "\n" << text;
  }

  // int4: 32 bytes of nibbles and two scales a row of 64.
  r.config.kv_dtype = DType::kI4;
  EXPECT_EQ(r.BytesPerToken(), 2u * 2 * (32 + 8));
  // A float dtype serves from pools of its own dtype, with no reason to give.
  r.config.kv_dtype = DType::kBF16;
  r.serving.pool_dtype = DType::kBF16;
  j = json::parse(ToJson(r));
  EXPECT_EQ(j.at("cache_bytes").at("bytes_per_token_per_layer"), 2 * 2 * 128);
  EXPECT_TRUE(j.at("serving").at("pool_dtype_reason").is_null());
  EXPECT_EQ(ToText(r).find("pools store K/V as"), std::string::npos);
}

}  // namespace
}  // namespace ringkv::model::test
