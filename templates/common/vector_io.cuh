// Vector loads and stores of VEC consecutive elements of a storage type T,
// as 16-byte (or smaller, when VEC*sizeof(T) < 16) memory instructions.
// The caller guarantees the address is aligned to min(16, VEC*sizeof(T)).
#pragma once

template <int kBytes> struct EfChunk;
template <> struct EfChunk<16> { typedef uint4 type; };
template <> struct EfChunk<8> { typedef uint2 type; };
template <> struct EfChunk<4> { typedef unsigned int type; };
template <> struct EfChunk<2> { typedef unsigned short type; };

template <class T, int VEC>
__device__ __forceinline__ void ef_load_vec(const T* __restrict__ ptr, float (&out)[VEC]) {
  constexpr int kBytes = VEC * (int)sizeof(T) >= 16 ? 16 : VEC * (int)sizeof(T);
  constexpr int kPer = kBytes / (int)sizeof(T);
  typedef typename EfChunk<kBytes>::type Chunk;
#pragma unroll
  for (int c = 0; c < VEC / kPer; ++c) {
    const Chunk raw = reinterpret_cast<const Chunk*>(ptr)[c];
    const T* elems = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < kPer; ++j) out[c * kPer + j] = ef_to_float(elems[j]);
  }
}

template <class T, int VEC>
__device__ __forceinline__ void ef_store_vec(T* __restrict__ ptr, const float (&in)[VEC]) {
  constexpr int kBytes = VEC * (int)sizeof(T) >= 16 ? 16 : VEC * (int)sizeof(T);
  constexpr int kPer = kBytes / (int)sizeof(T);
  typedef typename EfChunk<kBytes>::type Chunk;
#pragma unroll
  for (int c = 0; c < VEC / kPer; ++c) {
    Chunk raw;
    T* elems = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int j = 0; j < kPer; ++j) elems[j] = ef_from_float<T>(in[c * kPer + j]);
    reinterpret_cast<Chunk*>(ptr)[c] = raw;
  }
}
