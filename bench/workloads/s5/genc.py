# Prints a big C file: N functions with loops and switch statements (for cc1 -O2).
import sys
n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
print("typedef unsigned long u64;")
for i in range(n):
    print(f"u64 f{i}(u64 x, u64 *a, int n) {{ u64 s = {i}; for (int k = 0; k < n; k++) {{ s = s * {i+3} + a[k] ^ (x >> {i % 13}); switch ((s + k) % 7) {{ case 0: s += {i}; break; case 1: s ^= x; break; case 2: s -= a[(k+{i})%n]; break; case 3: s *= 3; break; default: s += k; }} }} return s + f{i-1 if i else 0}(x, a, n > 0 ? n - 1 : 0) * (n > {i % 5}); }}")
print("int main(void) { return 0; }")
