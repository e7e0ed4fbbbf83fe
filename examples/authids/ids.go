package main

import (
	"context"
	"fmt"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/lockgov/lockgov/snowflake"
)

// IDs is a GORM plugin that fills a zero int64 primary key with a Snowflake ID before
// every create: the spec's BeforeCreate hook, registered once instead of written per model.
//
// The spec warns that GORM runs BeforeCreate once per record in a batch Create, so a
// mutex-based generator is hammered by big batches. Here a batch of n records takes its n
// IDs with one Fill call (one compare-and-swap per millisecond's worth), and the generator
// has no lock to contend for anyway.
type IDs struct {
	Gen *snowflake.Generator
}

// Name implements gorm.Plugin.
func (IDs) Name() string { return "lockgov:snowflake-ids" }

// Initialize implements gorm.Plugin.
func (p IDs) Initialize(db *gorm.DB) error {
	return db.Callback().Create().Before("gorm:create").Register(p.Name(), p.fill)
}

func (p IDs) fill(tx *gorm.DB) {
	st := tx.Statement
	if tx.Error != nil || st.Schema == nil || st.Schema.PrioritizedPrimaryField == nil {
		return
	}
	f := st.Schema.PrioritizedPrimaryField
	if f.DataType != schema.Int || f.FieldType.Kind() != reflect.Int64 {
		return
	}
	ctx := st.Context
	var zero []reflect.Value
	switch rv := st.ReflectValue; rv.Kind() {
	case reflect.Slice, reflect.Array:
		for i := range rv.Len() {
			elem := reflect.Indirect(rv.Index(i))
			if _, isZero := f.ValueOf(ctx, elem); isZero {
				zero = append(zero, elem)
			}
		}
	case reflect.Struct:
		if _, isZero := f.ValueOf(ctx, rv); isZero {
			zero = append(zero, rv)
		}
	}
	if len(zero) == 0 {
		return
	}
	ids, err := p.Gen.NextN(ctx, len(zero))
	if err != nil {
		// Clock stepped back too far, or the WorkerID lease is lost: fail the insert
		// rather than write an ID that could repeat.
		_ = tx.AddError(fmt.Errorf("authids: snowflake ID for %s: %w", st.Schema.Table, err))
		return
	}
	for i, elem := range zero {
		if err := f.Set(ctx, elem, ids[i]); err != nil {
			_ = tx.AddError(err)
			return
		}
	}
}

// FillID is the spec's per-model BeforeCreate, for code that prefers hooks on the model:
//
//	func (u *User) BeforeCreate(tx *gorm.DB) error { return FillID(tx.Statement.Context, gen, &u.ID) }
func FillID(ctx context.Context, gen *snowflake.Generator, id *int64) error {
	if *id != 0 {
		return nil
	}
	v, err := gen.NextID(ctx)
	if err != nil {
		return err
	}
	*id = v
	return nil
}
