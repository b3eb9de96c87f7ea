# Prints a medium Rust library: N generic functions and structs.
import sys
n = int(sys.argv[1]) if len(sys.argv) > 1 else 400
for i in range(n):
    print(f"""pub struct S{i}<T> {{ pub v: Vec<T>, pub k: u64 }}
impl<T: Clone + std::fmt::Debug> S{i}<T> {{
    pub fn run(&self, x: u64) -> u64 {{
        let mut s = self.k.wrapping_add({i});
        for (j, e) in self.v.iter().enumerate() {{ s = s.wrapping_mul({i} + 3) ^ (x >> (j % 13)) ^ format!("{{:?}}", e).len() as u64; }}
        s
    }}
}}
pub fn f{i}(x: u64) -> u64 {{ let s = S{i} {{ v: vec![x; 8], k: {i} }}; s.run(x) + S{i}::<String> {{ v: vec![x.to_string()], k: 1 }}.run(x) }}""")
