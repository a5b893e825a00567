// delete MODE, run with libhakmem.so preloaded (check.sh):
//   clean       new and delete in every form (sized, aligned, array,
//               nothrow) with the right sizes: no report
//   wrong-size  operator delete(p, size) with a size p was not asked
//               with: hakmem's sized delete reports it (free_sized)
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

struct alignas(64) Wide {
    char b[100];
};
struct Base {
    virtual ~Base() {}
    int x[10];
};
struct Derived : Base {
    ~Derived() override {}
    char more[300];
};

static void *volatile sink;

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    if (!std::strcmp(argv[1], "clean")) {
        for (int i = 0; i < 5000; i++) {
            Base *o = new Derived;   // deleted through the base: the virtual destructor passes the size
            delete o;
            Wide *w = new Wide;
            sink = w;
            delete w;
            Wide *a = new Wide[3];
            sink = a;
            delete[] a;
            std::vector<std::string> v;
            for (int k = 0; k < 20; k++) v.emplace_back(std::string(k * 10, 'x'));
            void *p = ::operator new(1000);
            ::operator delete(p, static_cast<std::size_t>(1000));
            p = ::operator new(3000, std::align_val_t(256));
            ::operator delete(p, static_cast<std::size_t>(3000), std::align_val_t(256));
            p = ::operator new(50, std::nothrow);
            ::operator delete(p, std::nothrow);
            p = ::operator new[](5000, std::align_val_t(4096));
            ::operator delete[](p, std::align_val_t(4096));
            p = ::operator new[](70000);
            ::operator delete[](p, static_cast<std::size_t>(70000));
        }
        std::puts("clean");
        return 0;
    }
    if (!std::strcmp(argv[1], "wrong-size")) {
        void *p = ::operator new(32);
        std::printf("call: free_sized(%p)\n", p);
        std::fflush(stdout);
        ::operator delete(p, static_cast<std::size_t>(4000));
        std::puts("survived");
        return 0;
    }
    return 2;
}
