// A C++ program of the kind pmig meets: four std::threads hand work items
// through a queue guarded by a std::mutex and a std::condition_variable,
// every item throws and catches an exception (the unwinder walks the
// stacks through libgcc's eh_frame lookup), allocates and frees std::map
// nodes and std::string buffers, and the main thread prints a checksum of
// everything at the end. The output depends only on ITEMS, so a migrated
// run must print what an unmigrated one does.
// Usage: cxxwork ITEMS
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Item {
    std::uint64_t n;
};

class Queue {
  public:
    void put(Item it) {
        {
            std::lock_guard<std::mutex> g(m_);
            q_.push_back(it);
        }
        cv_.notify_one();
    }
    bool take(Item &out) {
        std::unique_lock<std::mutex> g(m_);
        cv_.wait(g, [this] { return !q_.empty() || closed_; });
        if (q_.empty())
            return false;
        out = q_.front();
        q_.pop_front();
        return true;
    }
    void close() {
        {
            std::lock_guard<std::mutex> g(m_);
            closed_ = true;
        }
        cv_.notify_all();
    }

  private:
    std::mutex m_;
    std::condition_variable cv_;
    std::deque<Item> q_;
    bool closed_ = false;
};

std::uint64_t mix(std::uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

// Throws for most items, deep enough that the unwinder crosses frames.
std::uint64_t deep(std::uint64_t n, int depth) {
    if (depth == 0) {
        if (n % 7 != 0)
            throw std::runtime_error("item " + std::to_string(n));
        return mix(n);
    }
    std::string pad(32 + depth, 'a' + depth);
    return deep(n, depth - 1) + pad.size();
}

std::uint64_t work(std::uint64_t n) {
    std::map<std::uint64_t, std::string> m;
    for (int i = 0; i < 64; i++)
        m[mix(n + i) % 1000] = std::to_string(mix(n * i));
    std::uint64_t sum = 0;
    for (auto &kv : m)
        sum += kv.first + kv.second.size();
    try {
        sum += deep(n, 6);
    } catch (const std::runtime_error &e) {
        sum += std::string(e.what()).size() * 3;
    }
    return sum;
}

} // namespace

int main(int argc, char **argv) {
    std::uint64_t items = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 200000;
    Queue q;
    std::vector<std::uint64_t> sums(4, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++)
        threads.emplace_back([&q, &sums, t] {
            Item it;
            std::uint64_t s = 0;
            while (q.take(it))
                s += work(it.n);
            sums[t] = s;
        });
    for (std::uint64_t n = 0; n < items; n++)
        q.put(Item{n});
    q.close();
    std::uint64_t total = 0;
    for (auto &th : threads)
        th.join();
    for (auto s : sums)
        total += s;
    std::printf("%llu items, checksum %llu\n", (unsigned long long)items,
                (unsigned long long)total);
    return 0;
}
