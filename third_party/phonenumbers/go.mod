module github.com/nyaruka/phonenumbers

go 1.23.0

require google.golang.org/protobuf v1.36.12
