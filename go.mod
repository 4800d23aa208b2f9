module github.com/orisun-io/orisun

go 1.26.8

require github.com/google/uuid v1.6.0
