#include <absl/container/flat_hash_map.h>
#include <immintrin.h>
#include <sys/mman.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>
#include <random>
static inline uint64_t Mix64(uint64_t a, uint64_t b){ __uint128_t r=(__uint128_t)a*b; return (uint64_t)r ^ (uint64_t)(r>>64);}
static inline uint64_t H(uint64_t key){ uint64_t seed=0; return Mix64(key ^ seed ^ 0xa0761d6478bd642fULL, 0xe7037ed1a0b428dbULL ^ (seed >> 1)) ^ Mix64(key, 0x8ebc6af09c88c6e3ULL);}
__attribute__((target("avx2"))) __attribute__((noinline)) bool ProbeAvx2(const uint64_t* block, uint64_t bits) {
  __m256i lo, hi;
  asm volatile("vmovdqu %1, %0" : "=x"(lo) : "m"(*reinterpret_cast<const __m256i*>(block)));
  asm volatile("vmovdqu %1, %0" : "=x"(hi) : "m"(*reinterpret_cast<const __m256i*>(block + 4)));
  const __m256i low6 = _mm256_set1_epi64x(63); const __m256i one = _mm256_set1_epi64x(1);
  const __m256i n_lo = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128((int)bits));
  const __m256i n_hi = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128((int)(bits >> 32)));
  const __m256i m_lo = _mm256_sllv_epi64(one, _mm256_and_si256(n_lo, low6));
  const __m256i m_hi = _mm256_sllv_epi64(one, _mm256_and_si256(n_hi, low6));
  return (_mm256_testc_si256(lo, m_lo) & _mm256_testc_si256(hi, m_hi)) != 0;
}
// inline asm version, no target attr needed: returns true iff all bits set
static inline __attribute__((always_inline)) bool ProbeAsm(const uint64_t* block, uint64_t bits) {
  bool ok;
  asm("vmovq %[bits], %%xmm0\n\t"
      "vpmovzxbq %%xmm0, %%ymm1\n\t"
      "vpsrlq $32, %%xmm0, %%xmm0\n\t"
      "vpmovzxbq %%xmm0, %%ymm2\n\t"
      "vpcmpeqq %%ymm3, %%ymm3, %%ymm3\n\t"
      "vpsrlq $63, %%ymm3, %%ymm4\n\t"      /* ones: 1 */
      "vpsllvq %%ymm1, %%ymm4, %%ymm1\n\t"  /* 1 << (n & 63): sllv with count>63 gives 0, so mask needed */
      "vpsllvq %%ymm2, %%ymm4, %%ymm2\n\t"
      "vmovdqu %[lo], %%ymm5\n\t"
      "vmovdqu %[hi], %%ymm6\n\t"
      "vpandn %%ymm1, %%ymm5, %%ymm1\n\t"    /* ~lo & m_lo */
      "vpandn %%ymm2, %%ymm6, %%ymm2\n\t"
      "vpor %%ymm1, %%ymm2, %%ymm1\n\t"
      "vptest %%ymm1, %%ymm1\n\t"
      "sete %[ok]\n\t"
      "vzeroupper"
      : [ok] "=r"(ok)
      : [bits] "r"(bits & 0x3f3f3f3f3f3f3f3fULL), [lo] "m"(*(const char(*)[32])block), [hi] "m"(*(const char(*)[32])(block + 4))
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "cc");
  return ok;
}
struct Status { uint8_t code=0; std::unique_ptr<std::string> msg; };
struct F { uint64_t* w; std::atomic<uint64_t> blocks;
  uint64_t Block(uint64_t h) const { return (uint64_t)(((__uint128_t)Mix64(h,0x9E3779B97F4A7C15ULL)*blocks.load(std::memory_order_relaxed))>>64);}
  static uint64_t Bits(uint64_t h){ return Mix64(h ^ 0x5851F42D4C957F2DULL, 0xD6E8FEB86659FD93ULL);}
  void Add(uint64_t h){ uint64_t* b=&w[Block(h)*8]; uint64_t bits=Bits(h); for(int i=0;i<8;i++) b[i]|=1ull<<((bits>>(i*8))&63);}
  __attribute__((noinline)) bool MayContain(uint64_t h) const { return ProbeAvx2(&w[Block(h)*8], Bits(h)); }
};
struct Table {
  std::atomic<bool> complete{true}; std::atomic<uint64_t> gen{0}; std::atomic<const F*> serving; void (*hook)(void*)=nullptr; void* ctx=nullptr;
  uint64_t pad[64];
  __attribute__((noinline)) bool Slow(uint64_t k, uint64_t h, uint64_t* v) const { pad[0]==k ? *v=1:0; return false; }
  __attribute__((noinline)) Status Find(uint64_t k, uint64_t* v) const {
    uint64_t h=H(k);
    if(!complete.load(std::memory_order_acquire)) return Status{5};
    uint64_t g=gen.load(std::memory_order_acquire); const F* f=serving.load(std::memory_order_acquire);
    if(hook) [[unlikely]] hook(ctx);
    bool maybe=f->MayContain(h);
    std::atomic_thread_fence(std::memory_order_acquire);
    if(!maybe && gen.load(std::memory_order_relaxed)==g) return Status{1};
    return Slow(k,h,v)? Status{0}:Status{1};
  }
  __attribute__((noinline)) Status FindLean(uint64_t k, uint64_t* v) const {
    uint64_t h=H(k);
    if(complete.load(std::memory_order_acquire)) [[likely]] {
      uint64_t g=gen.load(std::memory_order_acquire); const F* f=serving.load(std::memory_order_acquire);
      bool maybe=ProbeAsm(&f->w[f->Block(h)*8], F::Bits(h));
      std::atomic_thread_fence(std::memory_order_acquire);
      if(!maybe && gen.load(std::memory_order_relaxed)==g && !hook) [[likely]] return Status{1};
    }
    return Slow(k,h,v)? Status{0}:Status{1};
  }
};
int main(int argc,char**argv){
  uint64_t n = argc>1? strtoull(argv[1],0,10):2000000; double bpk = argc>2? atof(argv[2]):25;
  std::mt19937_64 rng(1); std::vector<uint64_t> keys(n), neg(n);
  for(auto&k:keys)k=rng(); for(auto&k:neg)k=rng();
  absl::flat_hash_map<uint64_t,uint64_t> m; for(auto k:keys) m[k]=k;
  F f; f.blocks=(uint64_t)(n*bpk/512); size_t bytes=((f.blocks*64)+(2<<20)-1)&~((size_t)(2<<20)-1);
  f.w=(uint64_t*)mmap(0,bytes+(2<<20),PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  f.w=(uint64_t*)(((uintptr_t)f.w+(2<<20)-1)&~((uintptr_t)(2<<20)-1)); madvise(f.w,bytes,MADV_HUGEPAGE);
  for(auto k:keys) f.Add(H(k));
  Table t; t.serving=&f;
  for(auto k:keys){ uint64_t v; if(t.FindLean(k,&v).code!=0 && t.FindLean(k,&v).code!=1) return 1; }
  auto run=[&](const char* name, auto fn){ double tot=0; int R=5; for(int r=0;r<R;r++){ auto t0=std::chrono::steady_clock::now(); uint64_t c=fn(); auto t1=std::chrono::steady_clock::now(); tot+=n/std::chrono::duration<double,std::micro>(t1-t0).count(); if(c==12345)printf("x");} printf("%-12s %.2f  ",name,tot/R); };
  for(int rep=0;rep<3;rep++){
  run("absl",[&]{uint64_t c=0; for(auto k:neg) if(m.find(k)!=m.end()) c++; return c;});
  run("bare",[&]{uint64_t c=0; for(auto k:neg){uint64_t h=H(k); if(ProbeAvx2(&f.w[f.Block(h)*8],F::Bits(h))) c++;} return c;});
  run("bareasm",[&]{uint64_t c=0; for(auto k:neg){uint64_t h=H(k); if(ProbeAsm(&f.w[f.Block(h)*8],F::Bits(h))) c++;} return c;});
  run("find",[&]{uint64_t c=0; for(auto k:neg){uint64_t v; if(t.Find(k,&v).code!=1) c++;} return c;});
  run("findlean",[&]{uint64_t c=0; for(auto k:neg){uint64_t v; if(t.FindLean(k,&v).code!=1) c++;} return c;});
  printf("\n");
  }
  // verify asm == avx2
  uint64_t diff=0; for(uint64_t i=0;i<1000000;i++){ uint64_t h=rng(); diff += ProbeAsm(&f.w[f.Block(h)*8],F::Bits(h)) != ProbeAvx2(&f.w[f.Block(h)*8],F::Bits(h)); } 
  uint64_t pos=0; for(auto k:keys){uint64_t h=H(k); pos+=ProbeAsm(&f.w[f.Block(h)*8],F::Bits(h));}
  printf("diff %lu pos %lu/%lu\n", diff, pos, n);
}
