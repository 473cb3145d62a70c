// CXX
// use_device_addr of list items reached through reference members of a
// class. clang maps such an item as a PTR_AND_OBJ entry whose base is
// `this`; the runtime hands back, in the base slot, the device begin minus
// the distance from the pointer stored at that base (for a reference
// member: the object's first word) to the item. Where the reference names
// an array of pointers the result is the device address of the element;
// for a plain reference member it is off by the object's first word, as in
// LLVM 22 (the program only compares addresses, it never dereferences).
#include <omp.h>
#include <stdint.h>
#include <stdio.h>

int *table_storage[4][8];
int slot_value = 5;
int counter_storage = 0;

struct Grid {
  int *(&table)[4][8] = table_storage;

  void check(int dev) {
    table[1][2] = &slot_value;
#pragma omp target enter data map(to : table[1][2 : 4])
    int **mapped = (int **)omp_get_mapped_ptr(&table[1][2], dev);
    printf("grid: mapped elsewhere=%d\n", mapped != nullptr && mapped != &table[1][2]);

    // The use_device_addr item lies in an earlier mapping; the map clause
    // names another element of the same array.
#pragma omp target data map(table[1][3]) use_device_addr(table[1][2])
    printf("grid: map [1][3], use [1][2]: %d\n", mapped == &table[1][2]);
#pragma omp target data map(table[1][5]) use_device_addr(table[1][4])
    printf("grid: map [1][5], use [1][4]: %d\n", mapped + 2 == &table[1][4]);
    // Same element in both clauses.
#pragma omp target data map(table[1][2]) use_device_addr(table[1][2])
    printf("grid: map and use [1][2]: %d\n", mapped == &table[1][2]);
#pragma omp target exit data map(release : table[1][2 : 4])
  }
};

struct Counter {
  long first = 111;
  int *unused = nullptr;
  int &count = counter_storage;
  int other = 0;

  void check(int dev) {
    // What LLVM 22 hands back: device begin - (&count - first word).
    intptr_t member_offset = (char *)&count - (char *)(uintptr_t)first;
#pragma omp target data map(to : other, count)
    {
      void *mapped = omp_get_mapped_ptr(&count, dev);
      printf("counter: mapped=%d\n", mapped != nullptr);
#pragma omp target data map(other, count) use_device_addr(count)
      {
        intptr_t device_offset = (char *)mapped - (char *)&count;
        printf("counter: same as mapped=%d offset is the member's=%d\n",
               mapped == (void *)&count, device_offset == member_offset);
      }
    }
  }
};

Grid grid;

int main() {
  int dev = omp_get_default_device();
  grid.check(dev);
  Counter c;
  c.check(dev);
  return 0;
}
