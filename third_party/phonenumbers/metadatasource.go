// Port of metadata/source/* + MetadataLoader from google/libphonenumber.
// Functions are kept in upstream source order to ease syncing.
// Last reconciled against: v9.0.32
package phonenumbers

import (
	"sync"
)

// metadataContainer bundles all of the metadata-derived lookup state used by
// the library. The package keeps a single active container (current), built
// from the embedded metadata on first use.
type metadataContainer struct {
	// The parsed metadata collection this container was built from.
	metadataCollection *PhoneMetadataCollection

	// A map from country code (as integer) to two letter region codes.
	countryCodeToRegion map[int][]string

	// A mapping from a region code to the PhoneMetadata for that region.
	regionToMetadataMap map[string]*PhoneMetadata

	// A mapping from a country calling code for a non-geographical entity to
	// the PhoneMetadata for that country calling code. Examples of the country
	// calling codes include 800 (International Toll Free Service) and 808
	// (International Shared Cost Service).
	countryCodeToNonGeographicalMetadataMap map[int]*PhoneMetadata

	// The set of regions that share country calling code 1.
	nanpaRegions map[string]struct{}

	// The set of regions the library supports.
	supportedRegions map[string]bool

	// All the calling codes we support.
	supportedCallingCodes map[int]bool

	// The set of calling codes that map to the non-geo entity region ("001").
	countryCodesForNonGeographicalRegion map[int]bool
}

// current is the active metadata container. otpguard's fork: it is built on
// first use, in two halves, instead of during package initialisation. The
// region tables (country calling codes, supported regions: one small file)
// come with currentRegions; the per-region metadata (the large protobuf
// document, most of upstream's init time) with currentMetadata. A process
// that only validates region codes never parses the large document, and one
// that parses numbers pays once, after start-up.
var (
	current      = &metadataContainer{}
	regionsOnce  sync.Once
	metadataOnce sync.Once
)

func currentRegions() *metadataContainer {
	regionsOnce.Do(initRegions)
	return current
}

func currentMetadata() *metadataContainer {
	regionsOnce.Do(initRegions)
	metadataOnce.Do(initMetadata)
	return current
}

func initRegions() {
	regionMap, err := loadIntArrayMap(regionData)
	if err != nil {
		panic(err)
	}
	current.setRegions(regionMap.Map)
}

func initMetadata() {
	coll, err := MetadataCollection()
	if err != nil {
		panic(err)
	}
	if err := current.setMetadata(coll); err != nil {
		panic(err)
	}
}

// setRegions fills the tables derived from the country-code-to-region map.
func (mc *metadataContainer) setRegions(countryCodeToRegion map[int][]string) {
	mc.countryCodeToRegion = countryCodeToRegion
	mc.nanpaRegions = make(map[string]struct{})
	mc.supportedRegions = make(map[string]bool, 320)
	mc.supportedCallingCodes = make(map[int]bool, 320)
	mc.countryCodesForNonGeographicalRegion = make(map[int]bool, 16)

	for eKey, regionCodes := range countryCodeToRegion {
		// We can assume that if the county calling code maps to the
		// non-geo entity region code then that's the only region code
		// it maps to.
		if len(regionCodes) == 1 && REGION_CODE_FOR_NON_GEO_ENTITY == regionCodes[0] {
			// This is the subset of all country codes that map to the
			// non-geo entity region code.
			mc.countryCodesForNonGeographicalRegion[eKey] = true
		} else {
			// The supported regions set does not include the "001"
			// non-geo entity region code.
			for _, val := range regionCodes {
				mc.supportedRegions[val] = true
			}
		}

		mc.supportedCallingCodes[eKey] = true
	}
	// If the non-geo entity still got added to the set of supported regions it
	// must be because there are entries that list the non-geo entity alongside
	// normal regions (which is wrong). If we discover this, remove the non-geo
	// entity from the set of supported regions.
	delete(mc.supportedRegions, REGION_CODE_FOR_NON_GEO_ENTITY)

	for _, val := range countryCodeToRegion[NANPA_COUNTRY_CODE] {
		mc.nanpaRegions[val] = struct{}{}
	}
}

// setMetadata fills the per-region metadata maps from a parsed collection.
func (mc *metadataContainer) setMetadata(coll *PhoneMetadataCollection) error {
	metadataList := coll.GetMetadata()
	if len(metadataList) == 0 {
		return ErrEmptyMetadata
	}
	mc.metadataCollection = coll
	mc.regionToMetadataMap = make(map[string]*PhoneMetadata)
	mc.countryCodeToNonGeographicalMetadataMap = make(map[int]*PhoneMetadata)
	for _, meta := range metadataList {
		region := meta.GetId()
		if region == "001" {
			// it's a non geographical entity
			mc.countryCodeToNonGeographicalMetadataMap[int(meta.GetCountryCode())] = meta
		} else {
			mc.regionToMetadataMap[region] = meta
		}
	}
	return nil
}

func readFromNanpaRegions(key string) (struct{}, bool) {
	v, ok := currentRegions().nanpaRegions[key]
	return v, ok
}

func readFromRegionToMetadataMap(key string) (*PhoneMetadata, bool) {
	v, ok := currentMetadata().regionToMetadataMap[key]
	return v, ok
}

func readFromCountryCodeToNonGeographicalMetadataMap(key int) (*PhoneMetadata, bool) {
	v, ok := currentMetadata().countryCodeToNonGeographicalMetadataMap[key]
	return v, ok
}

// MetadataCollection returns the embedded territory metadata collection,
// parsed once on first use and cached.
func MetadataCollection() (*PhoneMetadataCollection, error) {
	return metadataCollection()
}

var metadataCollection = sync.OnceValues(func() (*PhoneMetadataCollection, error) {
	rawBytes, err := decodeUnzip(numberData)
	if err != nil {
		return nil, err
	}
	return unmarshalMetadataCollection(rawBytes)
})
