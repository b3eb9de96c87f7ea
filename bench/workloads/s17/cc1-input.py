"""Writes the C file the seventeenth sweep compiles with cc1 -O2 (550
small functions with loops, and a main that calls each) to stdout; the
same bytes on every run (Python's seeded random)."""
import random

random.seed(5)
N = 550
out = []
for i in range(N):
    a, b, c = random.randint(1, 99), random.randint(1, 99), random.randint(1, 99)
    out.append(f"""static int f{i}(int x, int y) {{
    int s = 0;
    for (int k = 0; k < x; k++) {{
        s += (k * {a}) ^ (y + {b});
        if (s % {c} == 0) s += (k << {a % 7});
    }}
    return s;
}}""")
out.append("int main(int argc, char **argv) { int t = 0;")
out += [f"  t += f{i}(argc, {i});" for i in range(N)]
out.append("  return t & 1; }")
print("\n".join(out))
