package domain

import (
	"time"

	"github.com/google/uuid"
)

// MediaStatus is the state of a media object.
type MediaStatus string

// Media statuses: awaiting_upload → processing → ready | rejected.
const (
	MediaAwaitingUpload MediaStatus = "awaiting_upload"
	MediaProcessing     MediaStatus = "processing"
	MediaReady          MediaStatus = "ready"
	MediaRejected       MediaStatus = "rejected"
)

// Media is an image owned by a workspace: uploaded by the client or transferred from a source
// URL. Its bytes live in object storage under keys derived from its id, so processing it
// twice overwrites the same objects instead of creating new ones.
type Media struct {
	ID           uuid.UUID
	WorkspaceID  uuid.UUID
	Filename     string
	ContentType  string // declared by the client
	Size         int64  // declared by the client
	Status       MediaStatus
	Source       string // "upload" or "transfer"
	SniffedType  string
	Width        int
	Height       int
	Variants     []MediaVariant
	RejectReason string
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// MediaVariant is a derived image.
type MediaVariant struct {
	// Name is the variant's name: "thumb" or "medium".
	Name string `json:"name"`
	// Width and Height are in pixels, Size in bytes.
	Width  int   `json:"width"`
	Height int   `json:"height"`
	Size   int64 `json:"size"`
}

// AllowedMediaTypes are the image types accepted.
var AllowedMediaTypes = []string{"image/jpeg", "image/png", "image/gif", "image/webp"}

// Media error codes.
var (
	ErrMediaNotFound = NewError(KindNotFound, "MEDIA_NOT_FOUND", "the media does not exist")
	// ErrMediaProcessingNotFound: the media processing does not exist.
	ErrMediaProcessingNotFound = NewError(KindNotFound, "MEDIA_PROCESSING_NOT_FOUND", "the media processing does not exist")
	ErrMediaTooLarge           = NewError(KindTooLarge, "MEDIA_TOO_LARGE", "the media is larger than allowed")
	ErrMediaTypeUnsupported    = NewError(KindInvalid, "MEDIA_TYPE_UNSUPPORTED", "content_type must be image/jpeg, image/png, image/gif or image/webp").WithField("content_type", "unsupported")
	ErrMediaNotUploaded        = NewError(KindConflict, "MEDIA_NOT_UPLOADED", "the media's bytes have not been uploaded")
	ErrMediaAlreadyComplete    = NewError(KindConflict, "MEDIA_ALREADY_COMPLETED", "the media upload was already completed")
)

// NewMedia validates the client's description of an upload. The filename must be valid
// UTF-8 without control characters, at most MaxFilenameLength characters; it is kept as
// SanitizeFilename makes it (its last path segment), and refused when nothing remains.
func NewMedia(id, workspaceID uuid.UUID, filename, contentType string, size, maxSize int64, now time.Time) (Media, error) {
	if err := checkLine("filename", filename, MaxFilenameLength); err != nil {
		return Media{}, err
	}
	if filename = SanitizeFilename(filename); filename == "" {
		return Media{}, Invalid("filename", "required: a file name, not a path")
	}
	ok := false
	for _, t := range AllowedMediaTypes {
		ok = ok || t == contentType
	}
	if !ok {
		return Media{}, ErrMediaTypeUnsupported
	}
	if size <= 0 {
		return Media{}, Invalid("size", "must be a positive number of bytes")
	}
	if size > maxSize {
		return Media{}, ErrMediaTooLarge.WithMessage("the media is larger than %d bytes", maxSize)
	}
	return Media{ID: id, WorkspaceID: workspaceID, Filename: filename, ContentType: contentType, Size: size,
		Status: MediaAwaitingUpload, Source: "upload", CreatedAt: now, UpdatedAt: now}, nil
}

// MediaObjectKey is where the original bytes of a media live.
func MediaObjectKey(workspaceID, mediaID uuid.UUID) string {
	return "workspaces/" + workspaceID.String() + "/media/" + mediaID.String() + "/original"
}

// MediaVariantKey is where a derived image lives: a pure function of the media and the
// variant, so deriving twice overwrites.
func MediaVariantKey(workspaceID, mediaID uuid.UUID, variant string) string {
	return "workspaces/" + workspaceID.String() + "/media/" + mediaID.String() + "/" + variant + ".jpg"
}

// MediaTask is the validation and derivation task of a media.
type MediaTask struct {
	Task
	MediaID uuid.UUID
}

// MediaUploadCompleted asks a worker to validate and process an uploaded media.
type MediaUploadCompleted struct {
	MediaID      uuid.UUID `json:"media_id"`
	ProcessingID uuid.UUID `json:"processing_id"`
	OperationID  uuid.UUID `json:"operation_id"`
}

// EventType implements Event.
func (MediaUploadCompleted) EventType() string { return "media.upload_completed" }

// AggregateType implements Event.
func (MediaUploadCompleted) AggregateType() string { return "media" }

// AggregateID implements Event.
func (e MediaUploadCompleted) AggregateID() string { return e.MediaID.String() }

// MaterialTransfer copies material from a source URL into our storage, as a new media.
// The object key and the media id are fixed when the transfer is created, so a resumed
// transfer writes the same object and the same media row.
type MaterialTransfer struct {
	Task
	SourceURL string
	MediaID   uuid.UUID
	Bytes     int64
	Stored    bool
}

// Material transfer errors.
var (
	ErrTransferNotFound = NewError(KindNotFound, "TRANSFER_NOT_FOUND", "the material transfer does not exist")
	// ErrSourceURLInvalid: not an absolute http(s) URL, it carries user info, or it is not
	// storable (longer than MaxSourceURLLength, control characters).
	ErrSourceURLInvalid = NewError(KindInvalid, "SOURCE_URL_INVALID",
		"source_url must be an absolute http or https URL").WithField("source_url", "invalid")
)

// ValidateSourceURL refuses with ErrSourceURLInvalid a source URL the transfer could not
// store: not valid UTF-8, longer than MaxSourceURLLength characters, or holding a control
// character. Whether it is an http(s) URL to an allowed address is the fetcher's check.
func ValidateSourceURL(sourceURL string) error {
	if checkLine("source_url", sourceURL, MaxSourceURLLength) != nil {
		return ErrSourceURLInvalid.WithMessage("source_url must be valid UTF-8 without control characters, at most %d characters", MaxSourceURLLength)
	}
	return nil
}

// MaterialTransferRequested asks a worker to run a transfer.
type MaterialTransferRequested struct {
	TransferID  uuid.UUID `json:"transfer_id"`
	OperationID uuid.UUID `json:"operation_id"`
	MediaID     uuid.UUID `json:"media_id"`
}

// EventType implements Event.
func (MaterialTransferRequested) EventType() string { return "material_transfer.requested" }

// AggregateType implements Event.
func (MaterialTransferRequested) AggregateType() string { return "material_transfer" }

// AggregateID implements Event.
func (e MaterialTransferRequested) AggregateID() string { return e.TransferID.String() }

func init() {
	RegisterEvent(MediaUploadCompleted{})
	RegisterEvent(MaterialTransferRequested{})
}

// RequestEvent implements Requested.
func (t MediaTask) RequestEvent() Event {
	return MediaUploadCompleted{MediaID: t.MediaID, ProcessingID: t.ID, OperationID: t.OperationID}
}

// RequestEvent implements Requested.
func (t MaterialTransfer) RequestEvent() Event {
	return MaterialTransferRequested{TransferID: t.ID, OperationID: t.OperationID, MediaID: t.MediaID}
}

// MediaProcessed (media.ready) is emitted when a media was validated and its variants derived: it can be used.
// An integration event.
type MediaProcessed struct {
	// MediaID is the media (GET /v1/workspaces/{ws}/media/{id}).
	MediaID uuid.UUID `json:"media_id"`
	// OperationID is the operation of the media's processing.
	OperationID uuid.UUID `json:"operation_id"`
	// ContentType is the type sniffed from the bytes; Width and Height are in pixels.
	ContentType string `json:"content_type"`
	Width       int    `json:"width"`
	Height      int    `json:"height"`
	// Variants are the derived images (GET the media for their URLs).
	Variants []MediaVariant `json:"variants"`
}

// EventType implements Event.
func (MediaProcessed) EventType() string { return "media.ready" }

// AggregateType implements Event.
func (MediaProcessed) AggregateType() string { return "media" }

// AggregateID implements Event.
func (e MediaProcessed) AggregateID() string { return e.MediaID.String() }

func init() {
	RegisterIntegrationEvent(MediaProcessed{}, "A media (uploaded, or fetched by a material transfer) was validated and its variants "+
		"derived: it is ready to use.")
}
