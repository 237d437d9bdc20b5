// WrapperCache: forwarding as the reference's (StartForward, CopyPrefix,
// Remove, SetNonCausalRows to every cache; Update and Get to the selected one,
// reset to 0 by StartForward; CanResume iff every cache can), and all or
// nothing: a fake cache that fails on demand, and the caches before it are put
// back as they were.
#include "ringkv/wrapper_cache.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <random>
#include <string>
#include <vector>

#include "batch/hand_plan.h"
#include "cache/cache_test_util.h"
#include "ringkv/encoder_cache.h"
#include "ringkv/error.h"

namespace ringkv {
namespace {

using test::ErrorOf;

// A cache whose whole state is the log of the calls it accepted; it throws,
// changing nothing, on the operation named in fail_on.
class FakeCache final : public SequenceCache {
 public:
  explicit FakeCache(std::string name) : name_(std::move(name)) {}

  std::vector<std::string> log;  // the state
  std::string fail_on;
  bool can_resume = true;
  int restores = 0;
  mutable std::vector<int> gets;

  void StartForward(const Batch& batch, ForwardMode mode) override {
    Accept("StartForward", fmt::format("start {} {}", batch.positions.size(),
                                       mode == ForwardMode::kStore ? "store" : "reserve"));
  }
  void SetNonCausalRows(std::span<const std::int64_t> rows) override {
    Accept("SetNonCausalRows", fmt::format("noncausal {}", rows.size()));
  }
  BatchHistory Update(int layer, const Tensor& /*keys*/, const Tensor& /*values*/) override {
    Accept("Update", fmt::format("update {}", layer));
    return BatchHistory();
  }
  BatchHistory Get(int layer) const override {
    gets.push_back(layer);
    return BatchHistory();
  }
  void CopyPrefix(SequenceId src, SequenceId dst, Position len) override {
    Accept("CopyPrefix", fmt::format("copy {} {} {}", src, dst, len));
  }
  bool CanResume(SequenceId /*seq*/, Position /*pos*/) const override { return can_resume; }
  void Remove(SequenceId seq, Position begin, Position end) override {
    Accept("Remove", fmt::format("remove {} {} {}", seq, begin, end));
  }

  struct Saved final : State {
    const FakeCache* owner;
    std::vector<std::string> log;
    Saved(const FakeCache* o, std::vector<std::string> l) : owner(o), log(std::move(l)) {}
  };
  std::unique_ptr<State> SaveState() const override { return std::make_unique<Saved>(this, log); }
  void RestoreState(const State& state) override {
    const auto* saved = dynamic_cast<const Saved*>(&state);
    if (saved == nullptr || saved->owner != this) throw Error("[FakeCache] not my state");
    log = saved->log;
    ++restores;
  }

 private:
  void Accept(const char* op, std::string entry) {
    if (fail_on == op) throw Error(fmt::format("[{}::{}] refused on demand", name_, op));
    log.push_back(std::move(entry));
  }
  std::string name_;
};

struct Tokens {
  std::vector<Position> positions;
  std::vector<SequenceId> sequences;
  Batch AsBatch() const { return {positions, sequences}; }
};

class WrapperCacheTest : public ::testing::Test {
 protected:
  WrapperCacheTest() {
    // The encoder holds sequence 1's image (position 0) from a first pass.
    std::mt19937 rng(2);
    image_k_ = test::RandomTensor(rng, {1, 2, 3, 16});
    image_v_ = test::RandomTensor(rng, {1, 2, 3, 8});
    wrapper_.StartForward(first_.AsBatch());
    const std::array<std::int64_t, 1> row0{0};
    encoder_.SetEncoderRows(row0);
    wrapper_.Update(0, image_k_, image_v_);  // type 0: the encoder
    a_before_ = a_.log;
    b_before_ = b_.log;
  }

  // The encoder still holds exactly sequence 1's image, and the first pass.
  void ExpectEncoderAsBefore() {
    EXPECT_TRUE(encoder_.EncoderCached(1));
    EXPECT_FALSE(encoder_.EncoderCached(2));
    const BatchHistory h = encoder_.Get(0);
    EXPECT_EQ(h.Rows(), 2);
    EXPECT_EQ(h.VisibleKeys(0).ToVector(), image_k_.AsType(DType::kF16).ToVector());
  }

  EncoderCache encoder_;
  FakeCache a_{"A"}, b_{"B"};
  std::array<SequenceCache*, 3> list_{&encoder_, &a_, &b_};
  WrapperCache wrapper_{list_};
  Tokens first_{{0, 1}, {1, 1}};
  Tensor image_k_, image_v_;
  std::vector<std::string> a_before_, b_before_;
};

TEST_F(WrapperCacheTest, SequenceOperationsGoToEveryCacheInOrder) {
  EXPECT_EQ(a_.log, std::vector<std::string>{"start 2 store"});
  const std::array<std::int64_t, 1> rows{1};
  wrapper_.SetNonCausalRows(rows);
  wrapper_.CopyPrefix(1, 2, 1);
  wrapper_.Remove(2, 0, kEndOfSequence);
  wrapper_.StartForward(first_.AsBatch(), ForwardMode::kReserve);
  const std::vector<std::string> want{"start 2 store", "noncausal 1", "copy 1 2 1",
                                      "remove 2 0 2147483647", "start 2 reserve"};
  EXPECT_EQ(a_.log, want);
  EXPECT_EQ(b_.log, want);
  EXPECT_EQ(a_.restores, 0);
  EXPECT_FALSE(encoder_.EncoderCached(2));  // copied, then removed
  EXPECT_TRUE(encoder_.EncoderCached(1));
}

TEST_F(WrapperCacheTest, UpdateAndGetGoToTheSelectedTypeUntilTheNextStartForward) {
  EXPECT_EQ(&wrapper_.UnderlyingCache(), &encoder_);
  wrapper_.SetLayerType(2);
  EXPECT_EQ(&wrapper_.UnderlyingCache(), &b_);
  wrapper_.Update(5, image_k_, image_v_);
  (void)wrapper_.Get(6);
  EXPECT_EQ(b_.log.back(), "update 5");
  EXPECT_EQ(b_.gets, std::vector<int>{6});
  EXPECT_EQ(a_.log, a_before_);
  EXPECT_TRUE(a_.gets.empty());
  EXPECT_NE(ErrorOf([&] {
              wrapper_.SetLayerType(3);
            }).find("[WrapperCache::SetLayerType] type 3 is out of range for 3 caches"),
            std::string::npos);
  EXPECT_EQ(&wrapper_.UnderlyingCache(), &b_);
  wrapper_.StartForward(first_.AsBatch());
  EXPECT_EQ(&wrapper_.UnderlyingCache(), &encoder_);
  EXPECT_EQ(wrapper_.Get(0).Rows(), 2);
}

TEST_F(WrapperCacheTest, CanResumeIffEveryCacheCan) {
  EXPECT_TRUE(wrapper_.CanResume(1, 7));
  b_.can_resume = false;
  EXPECT_FALSE(wrapper_.CanResume(1, 7));
  b_.can_resume = true;
  a_.can_resume = false;
  EXPECT_FALSE(wrapper_.CanResume(1, 7));
}

TEST_F(WrapperCacheTest, AStartForwardTheLastCacheRefusesLeavesEveryCacheAsItWas) {
  wrapper_.SetLayerType(1);
  b_.fail_on = "StartForward";
  const Tokens next{{2, 0}, {1, 2}};
  EXPECT_EQ(ErrorOf([&] { wrapper_.StartForward(next.AsBatch()); }),
            "[B::StartForward] refused on demand");
  EXPECT_EQ(a_.log, a_before_);
  EXPECT_EQ(a_.restores, 1);
  EXPECT_EQ(b_.log, b_before_);
  ExpectEncoderAsBefore();
  EXPECT_EQ(&wrapper_.UnderlyingCache(), &a_);  // the type is not reset either
}

TEST_F(WrapperCacheTest, ACopyPrefixTheMiddleCacheRefusesNeverReachesTheLastOne) {
  a_.fail_on = "CopyPrefix";
  EXPECT_EQ(ErrorOf([&] { wrapper_.CopyPrefix(1, 2, 1); }), "[A::CopyPrefix] refused on demand");
  ExpectEncoderAsBefore();  // the encoder had shared sequence 1's image with 2
  EXPECT_EQ(a_.log, a_before_);
  EXPECT_EQ(b_.log, b_before_);
  EXPECT_EQ(a_.restores, 0);  // the refusing cache changed nothing itself
}

TEST_F(WrapperCacheTest, ARemoveOrSetNonCausalRowsRefusedLeavesEveryCacheAsItWas) {
  b_.fail_on = "Remove";
  EXPECT_EQ(ErrorOf([&] { wrapper_.Remove(1, 0, 1); }), "[B::Remove] refused on demand");
  ExpectEncoderAsBefore();  // the encoder had forgotten the image at position 0
  EXPECT_EQ(a_.log, a_before_);
  b_.fail_on = "SetNonCausalRows";
  const std::array<std::int64_t, 2> rows{0, 1};
  EXPECT_EQ(ErrorOf([&] { wrapper_.SetNonCausalRows(rows); }),
            "[B::SetNonCausalRows] refused on demand");
  EXPECT_EQ(a_.log, a_before_);
  EXPECT_EQ(a_.restores, 2);
  // A refused call in the first cache touches nothing.
  FakeCache first("F");
  std::array<SequenceCache*, 2> two{&first, &a_};
  WrapperCache pair(two);
  first.fail_on = "Remove";
  EXPECT_EQ(ErrorOf([&] { pair.Remove(1, 0, 1); }), "[F::Remove] refused on demand");
  EXPECT_EQ(a_.log, a_before_);
  EXPECT_EQ(a_.restores, 2);
}

TEST_F(WrapperCacheTest, StatesRoundTripAndRestoreOnlyIntoTheirWrapper) {
  wrapper_.SetLayerType(2);
  const std::unique_ptr<SequenceCache::State> saved = wrapper_.SaveState();
  wrapper_.CopyPrefix(1, 2, 1);
  wrapper_.StartForward(Tokens{{0}, {2}}.AsBatch());
  EXPECT_TRUE(encoder_.EncoderCached(2));
  wrapper_.RestoreState(*saved);
  ExpectEncoderAsBefore();
  EXPECT_EQ(a_.log, a_before_);
  EXPECT_EQ(b_.log, b_before_);
  EXPECT_EQ(&wrapper_.UnderlyingCache(), &b_);

  std::array<SequenceCache*, 1> one{&a_};
  WrapperCache other(one);
  const std::unique_ptr<SequenceCache::State> foreign = other.SaveState();
  const std::unique_ptr<SequenceCache::State> encoder_state = encoder_.SaveState();
  for (const SequenceCache::State* s : {foreign.get(), encoder_state.get()}) {
    EXPECT_NE(ErrorOf([&] {
                wrapper_.RestoreState(*s);
              }).find("[WrapperCache::RestoreState] the state was not saved by this wrapper"),
              std::string::npos);
  }
  ExpectEncoderAsBefore();
}

TEST(WrapperCacheConstructionTest, AnEmptyListANullOrARepeatedCacheIsRefused) {
  EXPECT_EQ(ErrorOf([] { WrapperCache w(std::span<SequenceCache* const>{}); }),
            "[WrapperCache] the list of caches is empty");
  FakeCache a("A");
  const std::array<SequenceCache*, 2> with_null{&a, nullptr};
  EXPECT_EQ(ErrorOf([&] { WrapperCache w(with_null); }), "[WrapperCache] caches[1] is null");
  const std::array<SequenceCache*, 2> twice{&a, &a};
  EXPECT_EQ(ErrorOf([&] { WrapperCache w(twice); }),
            "[WrapperCache] caches[1] is the same cache as caches[0]");
}

}  // namespace
}  // namespace ringkv
