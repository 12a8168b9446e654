package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"agent/event"
	"agent/llm"
	"agent/vision"
)

// Images (docs/PROTOCOL.md#images): each image a run gives its model is
// kept once, by the sha256 of its bytes, in the images table. The events
// and the messages name it by that hash, so a resume, a fork or a
// session's later run rebuilds the very request the model was sent.

// PutImages keeps the bytes of images given with a run's options
// (--image, a gateway's run.start), before the run is created or resumed;
// an image without them is kept already.
func (db *DB) PutImages(ctx context.Context, images []event.Image) error {
	if !carriesData(images) {
		return nil
	}
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("keep images: %w", err)
	}
	defer tx.Rollback()
	for _, img := range images {
		if img.Data == nil {
			continue // kept already
		}
		read, err := vision.Read(img.Name, img.Data)
		if err == nil {
			err = putImage(ctx, tx, read, db.now())
		}
		if err != nil {
			return fmt.Errorf("keep image %s: %w", img.Name, err)
		}
	}
	return tx.Commit()
}

// Images returns images, each with its bytes, in order; an image the
// store does not have is an error naming it.
func (db *DB) Images(ctx context.Context, images []event.Image) ([]event.Image, error) {
	var out []event.Image
	for _, img := range images {
		data, err := imageData(ctx, db.ro, img.SHA256)
		if err != nil {
			return nil, fmt.Errorf("image %s (%s): %w", img.Name, img.SHA256, err)
		}
		img.Data = data
		out = append(out, img)
	}
	return out, nil
}

// putImage stores the bytes of img, as vision.Read read them, once.
func putImage(ctx context.Context, tx *txn, img event.Image, now time.Time) error {
	_, err := tx.ExecContext(ctx, `
		INSERT INTO images (sha256, media_type, bytes, width, height, data, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (sha256) DO NOTHING`,
		img.SHA256, img.MediaType, img.Bytes, img.Width, img.Height, img.Data, formatTime(now))
	return err
}

// keepImages stores the bytes of the images a message.completed or
// tool.completed brings, and leaves them out of the event, which then
// names each by its hash. What each is comes from its bytes, not from the
// event; bytes that are no image a model is given are left out (the loop
// read them already: only a forged event brings such).
func keepImages(ctx context.Context, tx *txn, e *event.Event, now time.Time) error {
	// Only a key "data" carries bytes: inside a JSON string its quotes
	// are escaped, so every other event is passed over unread.
	if !bytes.Contains(e.Data, []byte(`"data":`)) {
		return nil
	}
	switch e.Type {
	case event.MessageCompleted:
		return keepImagesOf(ctx, tx, e, now, func(d *event.MessageData) *[]event.Image { return &d.Images })
	case event.ToolCompleted:
		return keepImagesOf(ctx, tx, e, now, func(d *event.ToolCompletedData) *[]event.Image { return &d.Images })
	}
	return nil
}

// keepImagesOf is keepImages for an event whose data is a T with images.
func keepImagesOf[T any](ctx context.Context, tx *txn, e *event.Event, now time.Time, images func(*T) *[]event.Image) error {
	var d T
	if e.Decode(&d) != nil || !carriesData(*images(&d)) {
		return nil
	}
	var kept []event.Image
	for _, img := range *images(&d) {
		if img.Data == nil {
			kept = append(kept, img)
			continue
		}
		read, err := vision.Read(img.Name, img.Data)
		if err != nil {
			continue
		}
		if err := putImage(ctx, tx, read, now); err != nil {
			return err
		}
		read.Data = nil
		kept = append(kept, read)
	}
	*images(&d) = kept
	e.Data = event.New(e.Type, d).Data
	return nil
}

func carriesData(images []event.Image) bool {
	for _, img := range images {
		if img.Data != nil {
			return true
		}
	}
	return false
}

// imageData is the bytes of the image sha; ErrNotFound when the store
// does not have it.
func imageData(ctx context.Context, q querier, sha string) ([]byte, error) {
	var data []byte
	err := q.QueryRowContext(ctx, `SELECT data FROM images WHERE sha256 = ?`, sha).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	return data, err
}

// imagesJSON is a message's images as messages.images_json keeps them.
func imagesJSON(images []event.Image) (any, error) {
	if len(images) == 0 {
		return nil, nil
	}
	raw, err := json.Marshal(images)
	if err != nil {
		return nil, err
	}
	return string(raw), nil
}

// forModel is a stored message's images as the model is given them, with
// their bytes; one the store no longer has is left out.
func forModel(ctx context.Context, q querier, images []event.Image) ([]llm.Image, error) {
	return loadBytes(ctx, q, named(images))
}

// named is images as the model is given them, before their bytes.
func named(images []event.Image) []llm.Image {
	var out []llm.Image
	for _, img := range images {
		out = append(out, vision.ForModel(img))
	}
	return out
}

// loadBytes gives images their bytes; one the store no longer has is left
// out.
func loadBytes(ctx context.Context, q querier, images []llm.Image) ([]llm.Image, error) {
	var out []llm.Image
	for _, img := range images {
		data, err := imageData(ctx, q, img.SHA256)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", img.SHA256, err)
		}
		img.Data = data
		out = append(out, img)
	}
	return out, nil
}

// withBytes is msgs with the bytes of their images.
func withBytes(ctx context.Context, q querier, msgs []llm.Message) ([]llm.Message, error) {
	for i := range msgs {
		if len(msgs[i].Images) == 0 {
			continue
		}
		images, err := loadBytes(ctx, q, msgs[i].Images)
		if err != nil {
			return nil, err
		}
		msgs[i].Images = images
	}
	return msgs, nil
}
