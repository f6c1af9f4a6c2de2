// The fallback: every op without a kernel of its own here (kernels.cpp) runs CPU's kernel on host aliases of its
// device tensors (CPU tensors over the same bytes, no copy), after the device check that CUDA's kernel for the op
// would make. Which check is the plan's, and the plan is Python's (rules.py, `native_plan`): asked once per op,
// kept here. The checks below are copies of CUDA's, each citing the code it copies; none decides which op gets it.
//
// After the kernel: an in-place or out= result is the caller's own device tensor (its sizes and strides follow the
// alias's, and memory a resize gave the alias becomes the tensor's); a result over an argument's memory is a view
// of that device storage; a fresh result's memory is taken over as device memory, counted on the op's device.
#include "core.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/NestedTensorImpl.h>
#include <ATen/core/op_registration/adaption.h>
#include <ATen/core/stack.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

namespace samedevice {

std::array<std::optional<at::Generator>, kDeviceCount> default_generators;  // rng.py's, one per device

namespace {

// The rules (rules.py names them; the numbers are the plan's)
enum Rule : int {
  kCommon = 0,      // torchgen's whole-op check (check_and_update_common_device)
  kIterator = 1,    // TensorIterator's (compute_types), for `device_check: NoCheck` kernels
  kForeach = 2,     // a foreach op's fast path, else its per-tensor slow path
  kMissing = 3,     // no CUDA kernel: the op fails as the dispatcher fails for CUDA
  kIndex = 4,       // index.Tensor's
  kIndexPut = 5,    // index_put_'s
  kWhere = 6,       // where's
  kMaskedFill = 7,  // masked_fill's
  kUnchecked = 8,   // the kernel checks nothing across devices (it reads one tensor's metadata or value)
};
constexpr int kNoRandom = -1, kSeeded = -2;

struct Plan {
  int rule = kCommon;
  bool allow_cpu_scalar = false;  // an iterator op that takes a CPU scalar even with more than two inputs (lerp)
  int random = kNoRandom;         // kSeeded, or the position of its `Generator?` argument
  bool nested = false;            // CUDA has a NestedTensorCUDA kernel for it
  std::string nested_text;        // the NestedTensor kernel's wrapper name, or the error where it has none
  std::string text;               // the codegen wrapper's name (kCommon), or the error (kMissing)
  std::vector<int> written;       // arguments the op writes (in-place self, out=)
  std::vector<int> positional;    // arguments that are not keyword-only (the codegen checks only these)
};

using PlanFunction = int (*)(const char* op, int* rule, int* allow_cpu_scalar, int* random, int* nested, char* text,
                            size_t size);
PlanFunction ask_python = nullptr;
std::shared_mutex plans_mutex;
std::unordered_map<const c10::FunctionSchema*, Plan> plans;

const Plan& plan_of(const c10::OperatorHandle& op) {
  const auto* key = &op.schema();
  {
    std::shared_lock<std::shared_mutex> lock(plans_mutex);
    auto found = plans.find(key);
    if (found != plans.end()) return found->second;
  }
  const auto& schema = op.schema();
  std::string name = schema.name() + (schema.overload_name().empty() ? "" : "." + schema.overload_name());
  Plan plan;
  char text[1024] = {0};
  int allow = 0, nested = 0;
  TORCH_CHECK(ask_python != nullptr, "emulated accelerator: no plan for ", name, " (the rules are not loaded)");
  TORCH_CHECK(ask_python(name.c_str(), &plan.rule, &allow, &plan.random, &nested, text, sizeof text) == 0,
              "emulated accelerator: the rules failed to plan ", name);
  plan.allow_cpu_scalar = allow != 0;
  plan.nested = nested != 0;
  // the texts: the wrapper's name or a missing op's error, then (after a newline) a nested tensor's error
  std::string both(text);
  auto cut = both.find('\n');
  plan.text = both.substr(0, cut);
  plan.nested_text = cut == std::string::npos ? "" : both.substr(cut + 1);
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const auto* alias = arguments[i].alias_info();
    if (alias != nullptr && alias->isWrite()) plan.written.push_back(static_cast<int>(i));
    if (!arguments[i].kwarg_only()) plan.positional.push_back(static_cast<int>(i));
  }
  std::unique_lock<std::shared_mutex> lock(plans_mutex);
  return plans.emplace(key, std::move(plan)).first->second;
}

// Every tensor an argument holds (a Tensor, a Tensor?, a Tensor[] or a Tensor?[]).
template <typename F>
void each_tensor(const c10::IValue& v, F f) {
  if (v.isTensor()) {
    if (v.toTensor().defined()) f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) {
      if (t.defined()) f(t);
    }
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor() && e.toTensor().defined()) f(e.toTensor());
    }
  }
}

bool is_device(const at::Tensor& t) { return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1; }

[[noreturn]] void two_devices(c10::Device a, c10::Device b) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ", a, " and ",
              b, "!");
}

// TensorIteratorBase::compute_types (aten/src/ATen/TensorIterator.cpp): the common device is the first non-CPU
// operand's, outputs first; one 0-dim CPU *input* is allowed as a scalar when the config allows CPU scalars
// (binary and comparison ops); any other operand elsewhere raises, printing the common device first.
// The operands of one check, held without a heap allocation for the usual few.
using Operands = c10::SmallVector<at::Tensor, 4>;

void check_iterator(c10::ArrayRef<at::Tensor> outputs, c10::ArrayRef<at::Tensor> inputs, bool allow_scalar) {
  std::optional<c10::Device> common;
  for (const auto* group : {&outputs, &inputs}) {
    for (const auto& t : *group) {
      if (!common && t.defined() && !t.is_cpu()) common = t.device();
    }
  }
  if (!common) return;
  int scalars = allow_scalar ? 1 : 0;
  for (const auto& t : outputs) {
    if (t.defined() && t.device() != *common) two_devices(*common, t.device());
  }
  for (const auto& t : inputs) {
    if (!t.defined() || t.device() == *common) continue;
    if (scalars > 0 && t.is_cpu() && t.dim() == 0) {
      --scalars;
      continue;
    }
    two_devices(*common, t.device());
  }
}

bool is_written(const Plan& plan, int i) {
  return std::find(plan.written.begin(), plan.written.end(), i) != plan.written.end();
}

void check_common(const Plan& plan, const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args) {
  // check_and_update_common_device (aten/src/ATen/core/op_registration/adaption.h), which the codegen calls for
  // the out arguments, then the positional tensor arguments, of every CUDA kernel without `device_check: NoCheck`:
  // the first defined tensor sets the common device (even a CPU one), and nothing is exempt, not even a 0-dim CPU
  // tensor. Lists are checked per element under the list's name.
  std::optional<c10::Device> common;
  auto visit = [&](int i) {
    const auto& name = schema.arguments()[i].name();
    each_tensor(args[i], [&](const at::Tensor& t) {
      c10::impl::check_and_update_common_device(common, t, plan.text.c_str(), name.c_str());
    });
  };
  for (int i : plan.written) visit(i);
  for (int i : plan.positional) {
    if (!is_written(plan, i)) visit(i);
  }
}

void check_iterator_op(const Plan& plan, c10::ArrayRef<c10::IValue> args) {
  Operands outputs, inputs;
  size_t operands = 0;  // the op's inputs, an in-place op's self included
  for (int i : plan.written) each_tensor(args[i], [&](const at::Tensor& t) { outputs.push_back(t); });
  for (int i : plan.positional) {
    each_tensor(args[i], [&](const at::Tensor& t) {
      ++operands;
      if (!is_written(plan, i)) inputs.push_back(t);
    });
  }
  // BINARY_OP_CONFIG, BINARY_FLOAT_OP_CONFIG and the comparison config allow one CPU scalar, as does lerp's
  // (Lerp.cpp: .allow_cpu_scalars(true)); unary and ternary ones do not
  check_iterator(outputs, inputs, operands == 2 || plan.allow_cpu_scalar);
}

void check_foreach(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args) {
  // A foreach op whose tensors are not all on one device leaves CUDA's fast path for the slow one, which runs the
  // per-tensor op index by index (aten/src/ATen/native/ForeachOpsKernels.cpp); each of those is a TensorIterator
  // op with its own check. A `scalars` tensor (the .Tensor overloads) holds one number per tensor and must be on
  // CPU (convert_tensor_to_scalar_list): it is not an operand.
  std::vector<c10::List<at::Tensor>> lists;
  Operands singles;
  for (size_t i = 0; i < args.size(); ++i) {
    if (schema.arguments()[i].name() == "scalars") continue;
    if (args[i].isTensorList()) lists.push_back(args[i].toTensorList());
    if (args[i].isTensor()) singles.push_back(args[i].toTensor());
  }
  if (lists.empty()) return;
  for (size_t row = 0; row < lists[0].size(); ++row) {
    Operands outputs{lists[0].get(row)}, inputs;
    for (size_t l = 1; l < lists.size(); ++l) {
      if (row < lists[l].size()) inputs.push_back(lists[l].get(row));
    }
    inputs.insert(inputs.end(), singles.begin(), singles.end());
    check_iterator(outputs, inputs, true);
  }
}

void check_index(c10::ArrayRef<c10::IValue> args) {
  // check_indices_on_cpu_or_selfdevice (aten/src/ATen/native/TensorAdvancedIndexing.cpp): "Only allow:
  // `dev_tensor[{cpu,dev}_tensor]`"; CPU indices are then moved to self's device.
  const auto& self = args[0].toTensor();
  each_tensor(args[1], [&](const at::Tensor& i) {
    TORCH_CHECK(i.is_cpu() || i.device() == self.device(),
                "indices should be either on cpu or on the same device as the indexed tensor (", self.device(), ")");
  });
}

void check_index_put(c10::ArrayRef<c10::IValue> args) {
  // index_put_ (TensorAdvancedIndexing.cpp): indices on any device are moved to self's; a 0-dim CPU value is moved
  // too; any other value goes through a TensorIterator without CPU scalars.
  const auto& values = args[2].toTensor();
  if (!(values.is_cpu() && values.dim() == 0)) check_iterator({args[0].toTensor()}, {values}, false);
}

void check_where(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args) {
  // where_self_out (aten/src/ATen/native/TensorCompare.cpp): "allow CPU scalars on non-cpu device": a 0-dim CPU
  // condition, self or other is moved to the device first, any number of them.
  Operands outputs, inputs;
  for (size_t i = 0; i < args.size(); ++i) {
    bool out = schema.arguments()[i].name() == "out";
    each_tensor(args[i], [&](const at::Tensor& t) {
      if (out) {
        outputs.push_back(t);
      } else if (!(t.is_cpu() && t.dim() == 0)) {
        inputs.push_back(t);
      }
    });
  }
  check_iterator(outputs, inputs, false);
}

void check_masked_fill(c10::ArrayRef<c10::IValue> args) {
  // masked_fill__cuda (aten/src/ATen/native/cuda/Indexing.cu) checks self and mask itself; a 0-dim value tensor is
  // read as a number (`value.item()`) wherever it lives.
  const auto& self = args[0].toTensor();
  const auto& mask = args[1].toTensor();
  TORCH_CHECK(self.device() == mask.device(), "expected self and mask to be on the same device, but got mask on ",
              mask.device(), " and self on ", self.device());
}

void check(const Plan& plan, const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args) {
  switch (plan.rule) {
    case kCommon: return check_common(plan, schema, args);
    case kIterator: return check_iterator_op(plan, args);
    case kForeach: return check_foreach(schema, args);
    case kIndex: return check_index(args);
    case kIndexPut: return check_index_put(args);
    case kWhere: return check_where(schema, args);
    case kMaskedFill: return check_masked_fill(args);
    case kUnchecked: return;
    default: TORCH_CHECK_NOT_IMPLEMENTED(false, plan.text);
  }
}

// A nested tensor (the transformer fast path's packed batch) with `like`'s pieces over `storage`.
at::Tensor nested_over(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like) {
  auto* impl = at::native::get_nested_tensor_impl(like);
  return at::detail::make_tensor<at::native::NestedTensorImpl>(std::move(storage), c10::DispatchKeySet(key),
                                                               like.dtype(), impl->get_nested_sizes(),
                                                               impl->get_nested_strides(), impl->get_storage_offsets());
}

// A host alias's memory belongs to a device storage, which the alias's DataPtr holds (its context: a reference on
// the device StorageImpl) until the alias goes: a host alias handed to Python, or to gloo's asynchronous work, may
// outlive the call.
void release_kept(void* kept) { c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(kept)); }

// The device storage a host alias's storage lends, or none for any other CPU storage (a kernel's fresh memory, a CPU
// argument's).
std::optional<c10::Storage> lent_by(const c10::StorageImpl* host) {
  const auto& data = host->data_ptr();
  if (data.get_deleter() != &release_kept) return std::nullopt;
  auto* kept = static_cast<c10::StorageImpl*>(data.get_context());
  // an alias of memory its device storage has since given up (the device tensor resized) lends nothing
  if (kept->data() != data.get()) return std::nullopt;
  return c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(kept));
}

// A CPU storage borrowing `device`'s memory and keeping it alive (a host alias's DataPtr).
c10::DataPtr borrowing(c10::StorageImpl* device) {
  c10::raw::intrusive_ptr::incref(device);
  return c10::DataPtr(device->mutable_data(), device, &release_kept, c10::Device(c10::kCPU));
}

// A host storage's memory that is device memory already (a host alias a CPU kernel resized: the host alias
// allocator's), taken out of it to become a device storage's, counted where it was.
c10::DataPtr take_device_memory(c10::StorageImpl* host, c10::DeviceIndex index) {
  c10::DataPtr data = std::move(host->mutable_data_ptr());
  data.unsafe_set_device(c10::Device(c10::DeviceType::PrivateUse1, index));
  return data;
}

// The host aliases of one call: one host storage per device storage, so that CPU's overlap checks see what CUDA's
// would, and each result maps back to the device storage it views.
struct Aliases {
  struct Pair {
    // held, not borrowed: an argument's only reference may be the stack slot its alias replaces (PyTorch's math-bit
    // fallback hands an op a resolved clone that nothing else holds)
    c10::Storage device;
    c10::Storage host;
  };
  c10::SmallVector<Pair, 4> pairs;

  c10::Storage host_storage(c10::StorageImpl* device) {
    for (auto& p : pairs) {
      if (p.device.unsafeGetStorageImpl() == device) return p.host;
    }
    c10::DataPtr borrowed = borrowing(device);
    c10::Storage host(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), device->sym_nbytes(),
                                                            std::move(borrowed), host_alias_allocator(),
                                                            device->resizable()));
    pairs.push_back({c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(device)), host});
    return host;
  }

  at::Tensor host(const at::Tensor& t) {
    auto storage = host_storage(t.storage().unsafeGetStorageImpl());
    if (t.is_nested()) return nested_over(std::move(storage), c10::DispatchKey::NestedTensorCPU, t);
    // the conjugate and negative bits stay: a kernel that reads them (mm, dot, copy_: PyTorch's ConjugateFallback.cpp
    // lets those through with the bit set) computes with them
    constexpr c10::DispatchKeySet kept({c10::DispatchKey::Conjugate, c10::DispatchKey::Negative});
    auto alias = at::detail::make_tensor<c10::TensorImpl>(
        std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU) | (t.key_set() & kept), t.dtype());
    alias.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    return alias;
  }

  // A device storage whose alias a CPU kernel resized takes the new memory (the host alias allocator's, counted
  // on the op's device) and its size.
  void take_back_resized(c10::DeviceIndex index) {
    for (auto& p : pairs) {
      auto* host = p.host.unsafeGetStorageImpl();
      auto* device = p.device.unsafeGetStorageImpl();
      if (host->data() == device->data()) continue;
      device->set_data_ptr_noswap(take_device_memory(host, index));
      device->set_nbytes(host->nbytes());
      host->set_data_ptr_noswap(c10::DataPtr(device->mutable_data(), c10::Device(c10::kCPU)));
    }
  }

  // The device storage whose host alias `host` is, if any.
  std::optional<c10::Storage> device_storage_of(const c10::StorageImpl* host) const {
    for (const auto& p : pairs) {
      if (p.host.unsafeGetStorageImpl() == host) {
        return p.device;
      }
    }
    return std::nullopt;
  }
};

at::Tensor on_device(const c10::Storage& storage, const at::Tensor& like) {
  // the result's own keys (ZeroTensor, Conjugate, Negative) stay; its backend is the device
  auto keys = like.key_set().remove_backend(c10::BackendComponent::CPUBit) |
              c10::DispatchKeySet(c10::BackendComponent::PrivateUse1Bit);
  auto t = at::detail::make_tensor<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(storage), keys, like.dtype());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  return t;
}

// A CPU kernel's result, on the device: a view of an argument's device storage, or fresh memory taken over.
struct Results {
  Aliases& aliases;
  c10::DeviceIndex index;
  c10::SmallVector<std::pair<c10::StorageImpl*, c10::Storage>, 2> adopted;  // one device storage per fresh host one
  // how many of the op's results hold each host storage: a storage held by more is not the kernel's fresh memory
  // (a view of a CPU argument): the result stays where it is, on CPU
  c10::SmallVector<std::pair<const c10::StorageImpl*, size_t>, 4> holders;
  // the nested arguments' size, stride and offset tensors (CPU tensors, on CUDA too), which _nested_tensor_size &
  // co. return as they are: results that stay where they are
  std::vector<const c10::TensorImpl*> metadata;
  // `_device` only: a host alias from an earlier call (a Python kernel's view of its argument's alias) is its device
  // storage's; in an op's own call a CPU argument stays CPU, even one that is an alias
  bool lent = false;

  void count(const at::Tensor& h) {
    if (!h.defined() || !h.is_cpu() || !h.has_storage()) return;
    const auto* storage = h.storage().unsafeGetStorageImpl();
    for (auto& [s, n] : holders) {
      if (s == storage) {
        ++n;
        return;
      }
    }
    holders.emplace_back(storage, 1);
  }

  bool held_elsewhere(c10::StorageImpl* host) const {
    size_t ours = 1;
    for (const auto& [s, n] : holders) {
      if (s == host) ours = n;
    }
    return c10::raw::intrusive_ptr::use_count(host) > ours;
  }

  at::Tensor back(const at::Tensor& h) {
    if (!h.defined() || !h.is_cpu()) return h;
    TORCH_CHECK_NOT_IMPLEMENTED(h.layout() == c10::kStrided, "emulated accelerator: ", h.layout(),
                                " tensors are not supported on ", c10::get_privateuse1_backend(),
                                " devices (only dense, strided tensors are)");
    if (std::find(metadata.begin(), metadata.end(), h.unsafeGetTensorImpl()) != metadata.end()) return h;
    auto* host = h.storage().unsafeGetStorageImpl();
    // a host alias of memory its device tensor gave up when it was resized: that memory is freed
    TORCH_CHECK(!lent || host->data_ptr().get_deleter() != &release_kept || lent_by(host).has_value(),
                "emulated accelerator: a host alias whose device tensor was resized since views freed memory; it "
                "cannot come back to the device");
    bool known = aliases.device_storage_of(host).has_value() ||
                 (lent && (lent_by(host).has_value() || counted_on(host->data_ptr()).has_value()));
    for (const auto& [fresh, device] : adopted) known = known || fresh == host;
    if (!known && held_elsewhere(host)) return h;
    auto storage = device_storage(host);
    if (h.is_nested()) return nested_over(std::move(storage), c10::DispatchKey::NestedTensorPrivateUse1, h);
    return on_device(storage, h);
  }

  // the device storage a host storage is: an argument's, a host alias's from another call (a Python kernel's view of
  // its argument's alias, handed to `_device`), or fresh memory taken over (once per storage)
  c10::Storage device_storage(c10::StorageImpl* host) {
    if (auto viewed = aliases.device_storage_of(host)) return *viewed;
    if (lent) {
      if (auto storage = lent_by(host)) return *storage;
    }
    for (auto& [fresh, device] : adopted) {
      if (fresh == host) return device;
    }
    auto counted = counted_on(host->data_ptr());
    // device memory already (an alias a CPU kernel resized) is handed over, not counted again
    c10::DataPtr data = counted ? take_device_memory(host, *counted)
                                : adopt(host->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::kCPU))),
                                        host->nbytes(), index);
    c10::Storage device(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), host->nbytes(),
                                                              std::move(data), device_allocator(), host->resizable()));
    if (counted) host->set_data_ptr_noswap(borrowing(device.unsafeGetStorageImpl()));  // the alias stays valid
    adopted.emplace_back(host, device);
    return device;
  }
};

std::optional<c10::DeviceIndex> device_of(c10::ArrayRef<c10::IValue> args) {
  for (const auto& v : args) {
    std::optional<c10::DeviceIndex> found;
    each_tensor(v, [&](const at::Tensor& t) {
      if (!found && is_device(t)) found = t.device().index();
    });
    if (found) return found;
    if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      return v.toDevice().has_index() ? v.toDevice().index() : current_device();
    }
  }
  return std::nullopt;
}

// Run `kernel` with the CPU generator `cpu` holding `device`'s state; take the advanced state back and leave `cpu`
// as it was (rng.py's _lend: CPU kernels draw from CPU generators only).
std::mutex lending;  // one lend at a time: two at once would save and restore each other's states

template <typename F>
void lend(at::Generator device, at::Generator cpu, F kernel) {
  // A draw on the CPU by another thread while a lend holds the CPU default generator's state still takes from the
  // device's stream: CPU kernels lock the generator while they draw, so it cannot be held across the kernel.
  std::lock_guard<std::mutex> one_at_a_time(lending);
  at::Tensor saved, state;
  {
    std::lock_guard<std::mutex> a(cpu.mutex());
    saved = cpu.get_state();
  }
  {
    std::lock_guard<std::mutex> b(device.mutex());
    state = device.get_state();
  }
  {
    std::lock_guard<std::mutex> a(cpu.mutex());
    cpu.set_state(state);
  }
  auto give_back = [&] {
    std::lock_guard<std::mutex> a(cpu.mutex());
    state = cpu.get_state();
    cpu.set_state(saved);
  };
  try {
    kernel();
  } catch (...) {
    give_back();
    throw;
  }
  give_back();
  std::lock_guard<std::mutex> b(device.mutex());
  device.set_state(state);
}

void fallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const Plan& plan = plan_of(op);
  const bool nested = keys.has(c10::DispatchKey::NestedTensor);
  TORCH_CHECK_NOT_IMPLEMENTED(plan.nested || !nested, plan.nested_text);
  const auto& schema = op.schema();
  const size_t n = schema.arguments().size();
  const size_t base = stack->size() - n;
  if (nested) {
    // a NestedTensorCUDA kernel carries CUDA's whole-op check (torchgen: is_cuda_dispatch_key)
    Plan as_nested = plan;
    as_nested.rule = kCommon;
    as_nested.text = plan.nested_text;
    check(as_nested, schema, c10::ArrayRef<c10::IValue>(*stack).slice(base, n));
  } else {
    check(plan, schema, c10::ArrayRef<c10::IValue>(*stack).slice(base, n));
  }
  const auto found = device_of(c10::ArrayRef<c10::IValue>(*stack).slice(base, n));
  // no tensor on the device: the dispatcher chose it by a generator argument (torch.randperm(4, generator=
  // device_generator)), where CUDA runs its kernel on host tensors, with results that depend on the op
  TORCH_CHECK_NOT_IMPLEMENTED(found.has_value(), "Could not run '", schema.operator_name(), "' with arguments from the '",
                              c10::get_privateuse1_backend(), "' backend: none of its tensors is on the device (the "
                              "dispatcher chose the device by a generator argument)");
  const auto index = *found;
  const c10::OptionalDeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, index));

  // the arguments the op writes: (the caller's device tensor, its host alias)
  c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 2> written;
  Aliases aliases;
  bool results_here = true;
  std::vector<at::Tensor> nested_args;  // held: their metadata tensors are compared with the results
  for (size_t i = 0; i < n; ++i) {
    c10::IValue& v = (*stack)[base + i];
    if (v.isTensor()) {
      if (!is_device(v.toTensor())) continue;
      auto device = v.toTensor();
      if (device.is_nested()) nested_args.push_back(device);
      v = aliases.host(device);
      if (is_written(plan, static_cast<int>(i))) written.emplace_back(device, v.toTensor());
    } else if (v.isTensorList()) {
      auto list = v.toTensorList().copy();
      for (size_t j = 0; j < list.size(); ++j) {
        if (is_device(list.get(j))) list.set(j, aliases.host(list.get(j)));
      }
      v = list;
    } else if (v.isList()) {
      auto list = v.toList().copy();
      for (size_t j = 0; j < list.size(); ++j) {
        c10::IValue e = list.get(j);
        if (e.isTensor() && is_device(e.toTensor())) list.set(j, aliases.host(e.toTensor()));
      }
      v = list;
    } else if (v.isDevice()) {
      // the result goes where `device` says: the op's device (device_of), or a device of another kind (`.cpu()`
      // of a nested tensor), where the kernel puts it
      if (v.toDevice().type() == c10::DeviceType::PrivateUse1) {
        v = c10::Device(c10::kCPU);
      } else {
        results_here = false;
      }
    }
  }

  const c10::DispatchKeySet cpu(nested ? c10::DispatchKey::NestedTensorCPU : c10::DispatchKey::CPU);
  auto run = [&] { op.redispatchBoxed(cpu, stack); };
  const auto& mine = default_generators.at(index);
  if (plan.random == kSeeded && mine) {
    lend(*mine, at::detail::getDefaultCPUGenerator(), run);
  } else if (plan.random >= 0 && mine) {
    c10::IValue& g = (*stack)[base + plan.random];
    if (g.isNone()) {
      g = *mine;  // the device's default generator (a CPU generator: its numbers are CPU's)
      run();
    } else {
      auto given = g.toGenerator();
      // check_generator<CUDAGeneratorImpl> (aten/src/ATen/core/DistributionsHelper.h & co.): a random op on the
      // device takes a generator of the device's type only
      TORCH_CHECK(given.device().type() == c10::DeviceType::PrivateUse1, "Expected a '",
                  c10::get_privateuse1_backend(), "' device type for generator but found '",
                  c10::DeviceTypeName(given.device().type(), true), "'");
      auto cpu = at::make_generator<at::CPUGeneratorImpl>();
      g = cpu;
      lend(given, cpu, run);
    }
  } else {
    run();
  }

  aliases.take_back_resized(index);
  for (auto& [device, alias] : written) {
    // the geometry the kernel gave the alias (resize_ of an out= result, squeeze_, t_) is the caller's tensor's
    auto* impl = device.unsafeGetTensorImpl();
    if (device.is_nested()) continue;
    TORCH_CHECK(alias.storage().is_alias_of(aliases.host_storage(device.storage().unsafeGetStorageImpl())),
                "emulated accelerator: ", schema.operator_name(), " gave its argument other memory on the host, "
                "which the emulator cannot hand back to the device");
    if (impl->sizes() != alias.sizes() || impl->strides() != alias.strides() ||
        impl->storage_offset() != alias.storage_offset()) {
      impl->set_sizes_and_strides(alias.sizes(), alias.strides(), alias.storage_offset());
    }
  }
  Results results{aliases, index, {}, {}, {}};
  for (const auto& t : nested_args) {
    auto* impl = at::native::get_nested_tensor_impl(t);
    for (const auto* m : {&impl->get_nested_sizes(), &impl->get_nested_strides(), &impl->get_storage_offsets()}) {
      results.metadata.push_back(m->unsafeGetTensorImpl());
    }
  }
  auto back = [&](const at::Tensor& h) -> at::Tensor {
    for (auto& [device, alias] : written) {
      if (h.is_same(alias)) return device;  // an in-place or out= op returns its argument: the caller's tensor
    }
    return results_here ? results.back(h) : h;
  };
  const size_t returns = schema.returns().size();
  for (size_t r = stack->size() - returns; r < stack->size(); ++r) {
    const c10::IValue& v = (*stack)[r];
    if (v.isTensor()) results.count(v.toTensor());
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) results.count(t);
    }
  }
  for (size_t r = stack->size() - returns; r < stack->size(); ++r) {
    c10::IValue& v = (*stack)[r];
    if (v.isTensor()) {
      v = back(v.toTensor());
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) list.set(j, back(list.get(j)));
    }
  }
}

}  // namespace

at::Tensor host_alias(const at::Tensor& t) { return Aliases().host(t); }

at::Tensor device_result(const at::Tensor& host, c10::DeviceIndex index) {
  Aliases none;
  return Results{none, index, {}, {}, {}, true}.back(host);
}

void register_kernels(torch::Library& m);

}  // namespace samedevice

namespace {
// kept for the life of the process: a registration lives as long as its Library
torch::Library* aten_impl = nullptr;
torch::Library* fallback_impl = nullptr;
torch::Library* nested_impl = nullptr;
}  // namespace

// rng.py's generator for each device (torch.ops.samedevice._set_default_generator)
void set_default_generator(int64_t index, std::optional<at::Generator> generator) {
  TORCH_CHECK(index >= 0 && index < samedevice::kDeviceCount, "no emulated device ", index);
  samedevice::default_generators[index] = std::move(generator);
}

TORCH_LIBRARY(samedevice, m) {
  m.def("_set_default_generator(int index, Generator? generator) -> ()", &set_default_generator);
  // for the kernels that stay in Python (native.py, run_on_host): a device tensor's host alias, and a CPU kernel's
  // fresh result taken over as a device tensor
  m.def("_host(Tensor(a) self) -> Tensor(a)");
  m.def("_device(Tensor self, int index) -> Tensor");
}

TORCH_LIBRARY_IMPL(samedevice, PrivateUse1, m) {
  m.impl("_host", [](const at::Tensor& t) { return samedevice::host_alias(t); });
}

TORCH_LIBRARY_IMPL(samedevice, CPU, m) {
  m.impl("_device", [](const at::Tensor& t, int64_t index) {
    return samedevice::device_result(t, static_cast<c10::DeviceIndex>(index));
  });
}

// 1 when the native core is registered; `plan` is Python's rules (rules.py, native_plan), asked once per op.
extern "C" int samedevice_register_core(samedevice::PlanFunction plan) {
  if (aten_impl != nullptr) return 1;
  samedevice::ask_python = plan;
  c10::SetAllocator(c10::DeviceType::PrivateUse1, samedevice::device_allocator());
  aten_impl = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  samedevice::register_kernels(*aten_impl);
  fallback_impl = new torch::Library(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  fallback_impl->fallback(torch::CppFunction::makeFromBoxedFunction<&samedevice::fallback>());
  // a copy from or into a conjugate or negative view: PyTorch's copy_ sends a PrivateUse1 copy to _copy_from, whose
  // math-bit fallback would clone the view, which copies through _copy_from again, without end; the copy reads the
  // bits itself (CPU's copy_ on the host aliases, which keep them), as CUDA's copy kernel does
  for (auto key : {c10::DispatchKey::Conjugate, c10::DispatchKey::Negative}) {
    auto* lib = new torch::Library(torch::Library::IMPL, "aten", key, __FILE__, __LINE__);
    lib->impl("_copy_from", torch::CppFunction::makeFallthrough());
    lib->impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
  }
  nested_impl = new torch::Library(torch::Library::IMPL, "_", c10::DispatchKey::NestedTensorPrivateUse1, __FILE__,
                                   __LINE__);
  nested_impl->fallback(torch::CppFunction::makeFromBoxedFunction<&samedevice::fallback>());
  return 1;
}

// Ops with a CUDA kernel of their own and a composite kernel too (a structured op's functional and in-place
// variants): registered by name, or the dispatcher would give the device the composite (with another wrapper's
// name in its error and another order of checks). `names` is newline-separated.
extern "C" int samedevice_register_by_name(const char* names) {
  std::string all(names);
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find('\n', start);
    if (end == std::string::npos) end = all.size();
    aten_impl->impl(all.substr(start, end - start).c_str(),
                    torch::CppFunction::makeFromBoxedFunction<&samedevice::fallback>());
    start = end + 1;
  }
  return 1;
}
