module github.com/nyaruka/phonenumbers

go 1.23.0
