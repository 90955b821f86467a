// Package mediaproc handles the media-processing queue: the validation and derivation of an
// uploaded media, started by domain.MediaUploadCompleted.
//
// Contract. For each delivery the Handler
//
//  1. Step A (one RLS transaction): loads the domain.MediaTask with a row lock; a finished
//     task ends the delivery with nothing done (ErrSkip → nil). Otherwise it starts the task
//     (counting the attempt) and the operation, and reads the media.
//  2. Outside any transaction, holding one of the Handler's Decodes slots (waiting for
//     one if needed) from the read of the original until its variants are derived: reads
//     the original from object storage (domain.MediaObjectKey), checks its size against
//     MaxBytes and the declared size, inspects and decodes it with InspectFunc (decode
//     budget checked from the header; sniffed type allowed and equal to the declared
//     content_type), derives variants from the decoded pixels with the Inspected's
//     DeriveFunc (one decode per delivery); then stores each at domain.MediaVariantKey.
//  3. Step B (one RLS transaction): compare-and-set on the task (a task another delivery
//     finished meanwhile is left alone); the media becomes ready (sniffed type, dimensions,
//     variants) and the operation succeeds with {"media_id", "variants"}.
//
// Invalid media (missing object, too large or over the decode budget, size or type
// mismatch, corrupt or unsupported image) is a permanent, client-visible failure: the task fails, the media is rejected with
// the error code as its reject_reason, the operation fails with the code and its fixed
// message, and Handle returns a worker.Permanent error. Transient failures (storage
// unavailable) are returned for BullMQ to retry; on the last attempt they are recorded the
// same way (media rejected with the failure's code), so a media never stays "processing"
// after its job has given up.
//
// Re-entrancy. A redelivery before Step A repeats nothing (Step A is one transaction); one
// after the objects were stored but before Step B derives again and overwrites the same keys
// (deterministic: same set of objects, no duplicates); one after Step B finds the task
// finished and does nothing. Storage keys and storage error causes are kept out of returned
// errors, logs and operations.
//
// Wiring (infra/imaging has the same shapes, so its types convert directly):
//
//	mediaproc.New(mediaproc.Config{
//		Deps: deps, Tasks: postgres.NewMediaTasks(), Media: postgres.NewMedia(), Storage: store,
//		MaxBytes: maxMediaBytes, Decodes: 1,
//		InspectFunc: func(r io.Reader, max int64) (mediaproc.Inspected, error) {
//			im, err := imaging.Inspect(r, imaging.Limits{MaxBytes: max, MaxDecodeBytes: budget})
//			if err != nil {
//				return mediaproc.Inspected{}, err
//			}
//			return mediaproc.Inspected{Info: mediaproc.Info(im.Info), Data: im.Data,
//				DeriveFunc: func() ([]mediaproc.Variant, error) {
//					ds, err := im.Derive(imaging.DefaultVariants)
//					out := make([]mediaproc.Variant, len(ds))
//					for i, d := range ds {
//						out[i] = mediaproc.Variant(d)
//					}
//					return out, err
//				}}, nil
//		},
//	})
package mediaproc
