// Package memory is Atrium's long-term memory core: what a memory is, how it is
// stored without plaintext derivatives, and how it is found again.
//
// Nothing in the database is a plaintext derivative of a memory's text:
//   - the text is sealed with the owner's data key, the associated data binding
//     the memory id and owner, so a ciphertext moved to another row does not open;
//   - the lexical index holds HMAC-SHA256 tags (16 bytes) of normalised words and
//     CJK character bigrams under a key derived from the owner's data key;
//   - vectors are stored after a keyed randomised Hadamard transform (sign flips,
//     permutation, 3 rounds) derived from the owner's data key. It is orthogonal,
//     so cosine and L2 distances are unchanged, but a vector cannot be fed to the
//     public embedding model's inverters without the key. They are stored at
//     the embedder's width padded to a power of two (384 → 512, 1536 → 2048), as
//     sign bits and as float16; the sign bits are also cached in process for
//     search, never written anywhere else.
//
// What still leaks to someone holding the file but not the keys: how many
// memories each owner has and when they were written and used; the length of
// each text (ciphertext size, term count); the padded width of the embedder's
// vectors (blob lengths), a hint at which model made them; which memories of one owner share a
// word (equal tags) and how often it occurs; and, for one owner, distances
// between memories (the transform preserves them on purpose). Known pairs of
// plaintext and stored vector weaken the transform: with enough of them the
// rotation can be solved for, since it is linear. Destroying the owner's data
// key (crypto-shredding) makes every sealed text, tag and vector of that owner
// meaningless at once.
//
// Suggestions (suggestions.go, "ask before saving") are sealed the same way and have
// no index; their rows show when they were made, their op and kind, the length of the
// text, the chat they came from and, for an update, the id of the memory it targets.
package memory
