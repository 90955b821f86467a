// Package secret implements port.CredentialCipher with AES-256-GCM and key ids for rotation.
//
// Keys come from CREDENTIALS_KEYS, "id1:<base64 of 32 bytes>,id2:<…>". The first key is the
// current one and seals every new value; every listed key opens values sealed under its id, so
// rotation is: prepend a new key, re-seal rows at leisure, then drop the old key once no row
// names it. Sealed values are "v1" framed: a version byte, a random 96-bit nonce, then the GCM
// ciphertext and tag. The key id and the caller's associated data (port.CredentialsAD: the
// workspace and store ids) are authenticated, so a sealed value copied to another store, or
// relabeled with another key id, fails to open.
//
// When CREDENTIALS_KEYS is unset, New generates an ephemeral key (development only: values
// sealed with it are unreadable after a restart) and logs "generated ephemeral key" with its id,
// never the key. Set Config.RequireKeys in production to refuse that.
//
// Nothing in this package logs or returns key material or plaintext in an error.
package secret
