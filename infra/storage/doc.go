// Package storage implements port.ObjectStorage twice: Local, a directory on disk
// (STORAGE_DIR, the development default), and S3, any S3-compatible service through
// aws-sdk-go-v2 (S3_ENDPOINT, S3_BUCKET, …).
//
// Keys are deterministic paths such as "ws/<id>/media/<id>/original": relative, "/"-separated,
// without empty, "." or ".." segments, backslashes or control characters, at most 1024 bytes
// (ValidateKey). Put on an existing key overwrites it, so a derivation that runs twice leaves
// one object. Readers never see a partial object: Local writes a temporary file, syncs it and
// renames it into place (through an os.Root, so no key or symlink can reach outside the
// directory); S3 PUTs are atomic by nature.
//
// Direct uploads (UploadTarget, then CommitUpload) write a key once: a used upload URL never
// replaces the stored object. S3 returns a presigned PUT of a staging object ("staging/<key>")
// whose signed Content-Type and Content-Length the client must send; CommitUpload copies it to
// the key unless an object is already there, and deletes it. Local returns
// "PUT {PublicBaseURL}/v1/uploads/{token}", a URL on our own service, where token is an
// HMAC-signed, expiring grant naming the key, the content type and the maximum size
// (VerifyUploadToken); Local.UploadHandler is the http.Handler the HTTP layer mounts at that
// path: it streams the body into the store within the size limit, and only when no object
// exists under the key yet (409 UPLOAD_ALREADY_COMPLETED otherwise). Upload URLs and tokens are bearer capabilities: they are returned to
// the client that asked and never logged, stored in events, or put in errors.
package storage
