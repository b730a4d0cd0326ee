// The training state under GoogleTest: every case of cases::restore_grid at this world size
// (suite "restore", as `parity check` names them); the restore's deliberate mistakes caught by
// the cases' checks; every element saved exactly once (the bytes on disk equal the formula);
// and bad input refused on every rank with one line, the trainer left as it was.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "correctness/cases/compare.hpp"
#include "correctness/cases/restore.hpp"
#include "correctness/cases/tensor.hpp"
#include "correctness/cases/training.hpp"
#include "correctness/mpi_test.hpp"
#include "reference/core/error.hpp"
#include "reference/parallel/state/store.hpp"
#include "reference/parallel/state/whole.hpp"
#include "reference/parallel/techniques/techniques.hpp"
#include "reference/record/arrays.hpp"

namespace parity::test {
namespace {

namespace fs = std::filesystem;

void register_grid(Communicator& comm) {
  register_cases<cases::RestoreCase>("restore", cases::restore_grid(comm.size()), [](Communicator& world, const auto& c) {
    const cases::RestoreResult r = cases::run_restore_case(world, c);
    verbose(world, "%s: error %.3g bound %.3g loss %.3g identical %d bytes %.0f | %s\n", c.name().c_str(), r.error, r.bound,
            r.loss_error, r.bit_identical, r.saved_bytes, r.message.c_str());
    EXPECT_TRUE(r.passed) << c.name() << ": " << r.message;
    EXPECT_EQ(r.restored_exactly, 1) << c.name();
    if (c.before == c.after) {
      EXPECT_EQ(r.bit_identical, 1) << c.name();
    }
  });
}
const bool registered = add_registrar(register_grid);

class RestoreTest : public MpiTest {
 protected:
  // A directory every rank names the same, removed at the end.
  void SetUp() override {
    const std::string id = comm().all_gather_strings(comm().rank() == 0 ? std::to_string(std::random_device{}()) : "").front();
    root_ = fs::temp_directory_path() / ("parity-restore-test-" + id);
  }
  void TearDown() override {
    comm().barrier();
    if (comm().rank() == 0) fs::remove_all(root_);
    MpiTest::TearDown();
  }
  // Data parallelism with `zero` over every rank on the cases' tensor-parallel GPT.
  struct Training {
    std::unique_ptr<model::Model> model;
    std::unique_ptr<model::Optimizer> optimizer;
    std::unique_ptr<parallel::Trainer> trainer;
  };
  Training train(int steps, int zero = 0, DataType dtype = DataType::float32, int layers = 2) {
    Training t;
    model::GptConfig config = cases::tensor_case_model(dtype);
    config.layers = layers;
    t.model = model::build_gpt(config);
    t.optimizer = cases::case_adamw(dtype);
    parallel::DataParallelConfig dc;
    dc.zero_stage = comm().size() > 1 ? zero : 0;
    dc.global_batch = 2 * comm().size() + 1;
    t.trainer = parallel::make_trainer(comm(), *t.model, *t.optimizer, dc);
    const parallel::BatchSource source = parallel::batches_of(config);
    for (int step = 0; step < steps; ++step) t.trainer->step(source, static_cast<std::uint64_t>(step));
    return t;
  }
  // The UsageError message load_training_state raises (on every rank), "" when it loads.
  std::string refusal(Training& t, const fs::path& path) {
    try {
      parallel::load_training_state(comm(), *t.trainer, path);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  }
  fs::path root_;
};

TEST_F(RestoreTest, EveryElementIsSavedOnceByOneRank) {
  const auto parameters = static_cast<std::uint64_t>(model::build_gpt(cases::tensor_case_model(DataType::float32))->parameter_count());
  for (int zero : {0, 1, 3}) {
    Training t = train(1, zero);
    const parallel::SavedState saved = parallel::save_training_state(comm(), *t.trainer, root_ / std::to_string(zero), 1);
    // Values in float32 and AdamW's two float32 moments: 12 bytes a parameter, each once.
    EXPECT_EQ(saved.total_bytes, parameters * 12) << "zero " << zero;
    // Replicas split what they share: no rank writes much more than its share.
    EXPECT_LE(saved.bytes, saved.total_bytes / static_cast<std::uint64_t>(comm().size()) + 4096) << "zero " << zero;
    EXPECT_TRUE(fs::exists(root_ / std::to_string(zero) / "step-00000001" / "index.h5"));
  }
}

TEST_F(RestoreTest, AnAsynchronousSaveHoldsTheStateOfItsStepWhileTrainingGoesOn) {
  for (int zero : {0, 3}) {
    Training t = train(2, zero);
    const parallel::ParameterValues at_save = t.trainer->gathered(false);
    const fs::path root = root_ / ("async" + std::to_string(zero));
    parallel::AsyncStateSave save(comm(), *t.trainer, root, 2);
    // Two more steps while the files are written.
    const parallel::BatchSource source = parallel::batches_of(cases::tensor_case_model(DataType::float32));
    for (int step = 2; step < 4; ++step) t.trainer->step(source, static_cast<std::uint64_t>(step));
    EXPECT_EQ(parallel::latest_training_state(root), std::nullopt);  // no index yet: not a save
    const parallel::SavedState saved = save.finish();
    EXPECT_EQ(saved.directory, root / "step-00000002");
    Training fresh = train(0, zero);
    EXPECT_EQ(parallel::load_training_state(comm(), *fresh.trainer, root).next_step, 2u);
    const parallel::ParameterValues restored = fresh.trainer->gathered(false);
    EXPECT_EQ(restored.values, at_save.values) << "zero " << zero;
    EXPECT_EQ(restored.state, at_save.state) << "zero " << zero;
    EXPECT_EQ(fresh.trainer->parts().optimizer->steps_taken(), 2);
  }
}

TEST_F(RestoreTest, AWholeStateWrittenByOneProcessRestoresIntoAnyLayout) {
  // Saved from data parallelism, read whole, written again as a one-rank save (what state
  // import writes), and restored under ZeRO-3 over every rank: the same values and state.
  Training t = train(2);
  parallel::save_training_state(comm(), *t.trainer, root_ / "spread", 2);
  comm().barrier();
  if (comm().rank() == 0) {
    parallel::WholeState whole = parallel::read_whole_training_state(root_ / "spread");
    EXPECT_EQ(whole.next_step, 2u);
    EXPECT_EQ(whole.optimizer_steps, 2);
    EXPECT_EQ(whole.tensors.size(), 3 * t.model->parameters().size());
    parallel::write_whole_training_state(root_ / "whole", whole);
  }
  comm().barrier();
  Training sharded = train(0, 3);
  EXPECT_EQ(parallel::load_training_state(comm(), *sharded.trainer, root_ / "whole").next_step, 2u);
  const parallel::ParameterValues a = t.trainer->gathered(false), b = sharded.trainer->gathered(false);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.state, b.state);
}

TEST_F(RestoreTest, MistakesOfTheRestoreAreCaught) {
  const int n = comm().size();
  for (const char* fault : {"wrong_offset", "other_step", "missing_moment", "loss_scale"}) {
    cases::RestoreCase c;
    c.before.dp = n;
    c.after.dp = n;
    c.after.zero = n > 1 ? 1 : 0;
    c.precision = std::string(fault) == "loss_scale" ? "float16" : "float32";
    c.fault = fault;
    const cases::RestoreResult r = cases::run_restore_case(comm(), c);
    EXPECT_FALSE(r.passed) << c.name() << " passed: " << r.message;
    verbose(comm(), "%s: %s\n", c.name().c_str(), r.message.c_str());
  }
}

TEST_F(RestoreTest, AnUnrestoredRoutingStateIsCaught) {
  cases::RestoreCase c;
  c.moe = true;
  c.router = "aux_free";
  c.before.ep = comm().size() % 2 == 0 ? 2 : 1;
  c.after = c.before;
  c.fault = "routing_state";
  const cases::RestoreResult r = cases::run_restore_case(comm(), c);
  EXPECT_FALSE(r.passed) << c.name() << " passed: " << r.message;
  verbose(comm(), "%s: %s\n", c.name().c_str(), r.message.c_str());
}

TEST_F(RestoreTest, ABadPathIsRefusedInOneLine) {
  Training t = train(1);
  parallel::save_training_state(comm(), *t.trainer, root_, 1);
  EXPECT_NE(refusal(t, root_ / "nowhere").find("does not exist"), std::string::npos);
  EXPECT_NE(refusal(t, root_ / "step-00000001" / "index.h5").find("is not a directory"), std::string::npos);
  fs::create_directories(root_ / "empty");
  EXPECT_NE(refusal(t, root_ / "empty").find("no complete training state"), std::string::npos);
  // Saving the same step again is refused, and leaves the save there.
  EXPECT_THROW(parallel::save_training_state(comm(), *t.trainer, root_, 1), UsageError);
  EXPECT_EQ(refusal(t, root_), "");
}

TEST_F(RestoreTest, ASaveCutShortIsRefusedAndThePreviousOneLoads) {
  Training t = train(2);
  parallel::save_training_state(comm(), *t.trainer, root_, 2);
  parallel::StateSave cut;
  cut.fault = "stop_before_index";
  const parallel::SavedState partial = parallel::save_training_state(comm(), *t.trainer, root_, 3, cut);
  EXPECT_EQ(partial.directory.filename(), "step-00000003.partial");
  const std::string message = refusal(t, partial.directory);
  EXPECT_NE(message.find("cut short"), std::string::npos) << message;
  EXPECT_NE(message.find("step-00000002"), std::string::npos) << message;
  ASSERT_EQ(parallel::latest_training_state(root_), root_ / "step-00000002");
  EXPECT_EQ(parallel::load_training_state(comm(), *t.trainer, root_).next_step, 2u);
}

// Flips one byte of a piece's data inside a rank file (found by its bytes in the file).
void corrupt_first_piece(const fs::path& file) {
  std::vector<char> piece;
  {
    record::ArrayReader reader(file, parallel::kTrainingStateSchema, parallel::kTrainingStateVersion);
    const DataType type = reader.dtype("/pieces/0/data");
    piece.resize(reader.length("/pieces/0/data") * size_of(type));
    reader.read("/pieces/0/data", type, 0, reader.length("/pieces/0/data"), piece.data());
  }
  std::vector<char> bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const auto at = std::search(bytes.begin(), bytes.end(), piece.begin(), piece.end());
  ASSERT_NE(at, bytes.end()) << "the piece's bytes are not stored contiguously in " << file;
  at[static_cast<std::ptrdiff_t>(piece.size() / 2)] ^= 0x10;
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A piece read whole: the bytes a ranged read gives, and a dataset longer than the reader expects
// refused before it is read (a damaged index or rank file cannot make it allocate at will).
TEST_F(RestoreTest, APieceIsReadWholeOnlyWithinItsBound) {
  Training t = train(1);
  parallel::save_training_state(comm(), *t.trainer, root_, 1);
  record::ArrayReader reader(root_ / "step-00000001" / "rank-00000.h5", parallel::kTrainingStateSchema,
                             parallel::kTrainingStateVersion);
  const DataType type = reader.dtype("/pieces/0/data");
  const std::size_t n = reader.length("/pieces/0/data");
  ASSERT_GT(n, 1u);
  std::vector<std::byte> ranged(n * size_of(type));
  reader.read("/pieces/0/data", type, 0, n, ranged.data());
  EXPECT_EQ(reader.read_whole("/pieces/0/data", type, n), ranged);
  try {
    reader.read_whole("/pieces/0/data", type, n - 1);
    ADD_FAILURE() << "a dataset of " << n << " elements read with a bound of " << n - 1;
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("holds " + std::to_string(n) + " elements, more than the " +
                                         std::to_string(n - 1) + " expected"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(reader.read_whole("/pieces/0/data", type == DataType::float64 ? DataType::float32 : DataType::float64, n),
               UsageError);
  EXPECT_THROW(reader.read_whole("/pieces/0/none", type, n), UsageError);
}

TEST_F(RestoreTest, ACorruptOrMissingShardIsRefusedAndNothingIsHalfLoaded) {
  Training t = train(1);
  parallel::save_training_state(comm(), *t.trainer, root_, 1);
  Training later = train(2);
  parallel::save_training_state(comm(), *later.trainer, root_ / "later", 2);
  const fs::path save = root_ / "step-00000001";
  const int last = comm().size() - 1;
  auto copy_of = [&](const std::string& name) {
    const fs::path to = root_ / name / "step-00000001";
    if (comm().rank() == 0) {
      fs::create_directories(to.parent_path());
      fs::copy(save, to);
    }
    comm().barrier();
    return to;
  };
  const cases::Difference none{};
  const parallel::ParameterValues before = later.trainer->gathered(false);

  const fs::path corrupt = copy_of("corrupt");
  if (comm().rank() == 0) corrupt_first_piece(corrupt / "rank-00000.h5");
  comm().barrier();
  std::string message = refusal(later, corrupt);
  EXPECT_NE(message.find("CRC-32"), std::string::npos) << message;
  // Refused before anything was written: the trainer holds what it held.
  const cases::Difference d = cases::compare(later.trainer->gathered(false), before, cases::zeros_like(before));
  EXPECT_EQ(d.parameters, none.parameters);
  EXPECT_EQ(d.state, none.state);

  const fs::path missing = copy_of("missing");
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.h5", last);
  if (comm().rank() == 0) fs::remove(missing / name);
  comm().barrier();
  message = refusal(later, missing);
  EXPECT_NE(message.find("is missing"), std::string::npos) << message;

  const fs::path mixed = copy_of("mixed");
  if (comm().rank() == 0) fs::copy_file(root_ / "later" / "step-00000002" / name, mixed / name, fs::copy_options::overwrite_existing);
  comm().barrier();
  message = refusal(later, mixed);
  EXPECT_NE(message.find("another save"), std::string::npos) << message;
}

TEST_F(RestoreTest, AnotherModelOrPrecisionIsRefused) {
  Training t = train(1);
  parallel::save_training_state(comm(), *t.trainer, root_, 1);
  Training deeper = train(0, 0, DataType::float32, 3);
  std::string message = refusal(deeper, root_);
  EXPECT_NE(message.find("blocks.2"), std::string::npos) << message;
  Training shallower = train(0, 0, DataType::float32, 1);
  message = refusal(shallower, root_);
  EXPECT_NE(message.find("nothing in this run holds"), std::string::npos) << message;
  Training wider = train(0, 0, DataType::float64);
  message = refusal(wider, root_);
  EXPECT_NE(message.find("keeps the precision"), std::string::npos) << message;
}

}  // namespace
}  // namespace parity::test
