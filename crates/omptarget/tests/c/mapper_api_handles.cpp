// CXX
// The mapper entry points called with handles the program made itself, the
// way LLVM's runtime accepts them: a zero-initialised struct that starts
// with LLVM's component-list header (a std::vector's three null pointers
// are one), grown by the runtime with malloc/realloc so that the vector's
// destructor (operator delete, i.e. free) releases what was pushed.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <vector>

extern "C" int64_t __tgt_mapper_num_components(void *handle);
extern "C" void __tgt_push_mapper_component(void *handle, void *base,
                                            void *begin, int64_t size,
                                            int64_t type, void *name);

struct Component {
  void *base;
  void *begin;
  int64_t size;
  int64_t type;
  void *name;
};

// A handle shaped as the test programs of users shape it: a vector member.
struct VectorHandle {
  std::vector<Component> parts;
};

int main() {
  double data[16];

  VectorHandle vh;
  printf("empty vector handle: %" PRId64 "\n",
         __tgt_mapper_num_components(&vh));
  __tgt_push_mapper_component(&vh, data, &data[0], 8, 3, nullptr);
  __tgt_push_mapper_component(&vh, data, &data[1], 8, 3, nullptr);
  printf("vector handle after two pushes: %" PRId64 "\n",
         __tgt_mapper_num_components(&vh));

  // An opaque zeroed buffer: the count follows every push through several
  // regrowths, and the storage the runtime made is the program's to free.
  struct {
    void *storage;
    uint32_t words[2];
    unsigned char rest[48];
  } raw = {};
  for (int i = 0; i < 16; i++) {
    __tgt_push_mapper_component(&raw, data, &data[i], sizeof(double),
                                0x1 | ((int64_t)(i + 1) << 48), nullptr);
    printf("%" PRId64 "%s", __tgt_mapper_num_components(&raw),
           i == 15 ? "\n" : " ");
  }
  // The components are stored in order, as LLVM's MapComponentInfoTy.
  const Component *c = static_cast<const Component *>(raw.storage);
  int in_order = 1;
  for (int i = 0; i < 16; i++)
    in_order &= c[i].begin == &data[i] && c[i].size == (int64_t)sizeof(double) &&
                (c[i].type >> 48) == i + 1;
  printf("components in order: %d\n", in_order);
  free(raw.storage);
  return 0;
}
